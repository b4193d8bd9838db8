package cli

import (
	"encoding"
	"encoding/json"
	"errors"
	"maps"
	"reflect"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/roles"
)

// TestWrongTypesOneWording: for every role and every top-level field of
// the structs it decodes (Known.Config), a value of the wrong JSON type is
// refused by the role's own parser in the one wording, `config field
// "mtu": a JSON string cannot be read as an integer: ...`, code 6: never
// Go's `cannot unmarshal ... into Go struct field`, never a path with Go's
// names of embedded structs, never an error that names no field.
func TestWrongTypesOneWording(t *testing.T) {
	reg := roles.Registry()
	for _, name := range reg.Names() {
		r, _ := reg.Lookup(name)
		if r.Known == nil {
			continue
		}
		fields := map[string]reflect.StructField{}
		for _, c := range r.Known.Config {
			maps.Copy(fields, cniplug.JSONFields(reflect.TypeOf(c)))
		}
		for field, f := range fields {
			bad, ok := wrongValue(f.Type)
			if !ok || isCommon(field) {
				continue
			}
			own := map[string]any{"type": name}
			for k, v := range typesBase[name] {
				own[k] = v
			}
			own[field] = json.RawMessage(bad)
			obj, want := own, `config field "`+field+`"`
			if r.IPAM {
				obj = map[string]any{"type": "bridge", "ipam": own}
				want = `config field "ipam.` + field + `"`
			}
			obj["cniVersion"], obj["name"] = "1.0.0", "n"
			stdin, _ := json.Marshal(obj)
			a := &cniplug.Args{ContainerID: "cnibox-check", IfName: "eth0", Registry: reg, Getenv: func(string) string { return "" }}
			err := cniplug.CheckConfig(r, a, stdin)
			var ce *cniplug.CodedError
			switch {
			case err == nil:
				t.Errorf("%s: %s = %s: accepted", name, field, bad)
			case !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "unmarshal") || !errors.As(err, &ce) || ce.Code != types.ErrDecodingFailure:
				t.Errorf("%s: %s = %s: %v (want code 6 and %s)", name, field, bad, err, want)
			}
		}
	}
}

// typesBase are the fields a role's parser needs before it decodes the
// rest: without them it stops at the first missing one.
var typesBase = map[string]map[string]any{
	"dummy":      {"ipam": map[string]any{"type": "host-local", "subnet": "10.9.0.0/24"}},
	"vlan":       {"vlanId": 42, "master": "eth1"},
	"host-local": {"ranges": [][]map[string]any{{{"subnet": "10.9.0.0/24"}}}},
}

// wrongValue is a JSON value of another type than t takes (false: t
// takes anything, or reads itself).
func wrongValue(t reflect.Type) (string, bool) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	pt := reflect.PointerTo(t)
	switch {
	case t == reflect.TypeOf(json.Number("")):
		return `"x"`, true
	case pt.Implements(reflect.TypeOf((*json.Unmarshaler)(nil)).Elem()):
		return "", false
	case pt.Implements(reflect.TypeOf((*encoding.TextUnmarshaler)(nil)).Elem()):
		return "5", true
	}
	switch t.Kind() {
	case reflect.Interface:
		return "", false
	case reflect.String:
		return "5", true
	case reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Float32, reflect.Float64:
		return `"x"`, true
	case reflect.Slice, reflect.Array:
		return "5", true
	}
	return "5", true // an object
}

// isCommon reports whether field is one every config may hold, decoded by
// cniplug before any role (its own test is cniplug's).
func isCommon(field string) bool {
	for _, f := range commonFields() {
		if f == field {
			return true
		}
	}
	return false
}
