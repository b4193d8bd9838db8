package cniplug

import (
	"bytes"
	"encoding"
	"encoding/json"
	"errors"
	"reflect"
	"sort"
	"strings"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/cnibox/cnibox/internal/conffile"
)

// DecodeConf unmarshals a role's config (or a part of it, or a file it
// names) into v: the one place configs are decoded, so every role words a
// wrong type the same way. A value of the wrong JSON type is a decoding
// error (6) in the `config field "mtu": ...` form with what the field
// takes; what names the input for other errors ("stdin", "rangeFromFile").
// The message never quotes the value, which may come from a file.
func DecodeConf(what string, data []byte, v any) error {
	err := json.Unmarshal(data, v)
	if err == nil {
		return nil
	}
	return DecodeError(what, data, v, err)
}

// DecodeError words err, from decoding data into v (a pointer), as
// DecodeConf does: for a decoder of a role's own (flannel's keeps numbers
// as written). A value of the wrong JSON type names its field by the
// config's path, never by Go's (Go names an embedded struct in the path:
// "tuningFields.mtu" is "mtu"); so does a value a field's type refuses
// itself (a json.Number that is no number), found by decoding each
// top-level field alone.
func DecodeError(what string, data []byte, v any, err error) error {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		field := configPath(reflect.TypeOf(v), te.Field)
		if field == "" {
			field = what
		}
		kind, _, _ := strings.Cut(te.Value, " ") // "number 5": the kind only
		return typeError(field, kind, te.Type)
	}
	var se *json.SyntaxError
	if !errors.As(err, &se) {
		if field, kind, typ := refusedField(data, v); field != "" {
			if isText(deref(typ)) { // its own parser refused the string
				return Errorf(types.ErrDecodingFailure, "config field %q: the value is not %s: write it in the form docs/roles gives", field, deref(typ))
			}
			return typeError(field, kind, typ)
		}
	}
	return Errorf(types.ErrDecodingFailure, "%s: %s", what, conffile.JSONError(err))
}

// typeError is the one wording of a value of JSON kind that a field of
// Go type t cannot hold.
func typeError(field, kind string, t reflect.Type) error {
	takes, example := jsonWords(t)
	return Errorf(types.ErrDecodingFailure, "config field %q: a JSON %s cannot be read as %s: write it as %s", field, kind, takes, example)
}

// configPath is Go's path of a field (UnmarshalTypeError.Field) as the
// config writes it: the names of embedded structs, which Go puts in the
// path, left out. t is the decoded type.
func configPath(t reflect.Type, goPath string) string {
	if goPath == "" {
		return ""
	}
	var out []string
	for _, name := range strings.Split(goPath, ".") {
		t = deref(t)
		if t == nil || t.Kind() != reflect.Struct {
			out, t = append(out, name), nil
			continue
		}
		if f, ok := JSONFields(t)[name]; ok {
			out, t = append(out, name), f.Type
			continue
		}
		if f, ok := t.FieldByName(name); ok && f.Anonymous {
			t = f.Type // an embedded struct: not in the config's path
			continue
		}
		out, t = append(out, name), nil
	}
	return strings.Join(out, ".")
}

// deref is t without pointers, slices and arrays (a list's element).
func deref(t reflect.Type) reflect.Type {
	for t != nil && (t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Array) {
		t = t.Elem()
	}
	return t
}

// JSONFields are the fields encoding/json decodes struct type t's keys
// into, by key (embedded structs flattened; pointers followed): what a
// config of t may hold at its top level.
func JSONFields(t reflect.Type) map[string]reflect.StructField {
	out := map[string]reflect.StructField{}
	addJSONFields(deref(t), out)
	return out
}

func addJSONFields(t reflect.Type, out map[string]reflect.StructField) {
	if t == nil || t.Kind() != reflect.Struct {
		return
	}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch {
		case name == "-":
		case f.Anonymous && name == "":
			addJSONFields(deref(f.Type), out)
		case f.IsExported():
			if name == "" {
				name = f.Name
			}
			out[name] = f
		}
	}
}

// refusedField finds the top-level field of data whose value alone does
// not decode into v's type: its name, the value's JSON kind and the
// field's Go type ("" when none is, or v is no struct).
func refusedField(data []byte, v any) (string, string, reflect.Type) {
	t := deref(reflect.TypeOf(v))
	var top map[string]json.RawMessage
	if t == nil || t.Kind() != reflect.Struct || json.Unmarshal(data, &top) != nil {
		return "", "", nil
	}
	keys := make([]string, 0, len(top))
	for k := range top {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		one, _ := json.Marshal(map[string]json.RawMessage{k: top[k]})
		if json.Unmarshal(one, reflect.New(t).Interface()) == nil {
			continue
		}
		f, ok := JSONFields(t)[k]
		if !ok {
			return "", "", nil
		}
		return k, jsonKindOf(top[k]), f.Type
	}
	return "", "", nil
}

// jsonKindOf is the JSON kind of a value, in UnmarshalTypeError's words.
func jsonKindOf(raw json.RawMessage) string {
	b := bytes.TrimSpace(raw)
	if len(b) == 0 {
		return "value"
	}
	switch b[0] {
	case '"':
		return "string"
	case '{':
		return "object"
	case '[':
		return "array"
	case 't', 'f':
		return "bool"
	case 'n':
		return "null"
	}
	return "number"
}

// isNumber reports whether t is json.Number: a string in Go, a number in
// JSON. (A function, not a package variable: no code runs at start-up.)
func isNumber(t reflect.Type) bool { return t == reflect.TypeOf(json.Number("")) }

// isText reports whether t reads itself from a JSON string
// (netip.Prefix, netip.Addr: encoding.TextUnmarshaler).
func isText(t reflect.Type) bool {
	return t.Kind() != reflect.Pointer && reflect.PointerTo(t).Implements(reflect.TypeOf((*encoding.TextUnmarshaler)(nil)).Elem())
}

// JSONKind names what a Go type takes, in JSON words.
func JSONKind(t reflect.Type) string {
	kind, _ := jsonWords(t)
	return kind
}

// jsonWords names what a Go type takes in JSON words (kind) and shows a
// value of that kind (example): one table, so the two always agree.
func jsonWords(t reflect.Type) (kind, example string) {
	switch {
	case t == nil:
		return "this field", "the documented type"
	case isNumber(t):
		return "a number", "a number without quotes"
	case isText(t):
		return "a string", `a string in quotes ("...") in the form docs/roles gives`
	}
	switch t.Kind() {
	case reflect.Bool:
		return "true or false", "true or false, without quotes"
	case reflect.String:
		return "a string", `a string in quotes ("...")`
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer", "a whole number without quotes (e.g. 1500)"
	case reflect.Float32, reflect.Float64:
		return "a number", "a number without quotes"
	case reflect.Slice, reflect.Array:
		return "a list", "a list ([...])"
	case reflect.Pointer:
		return jsonWords(t.Elem())
	}
	return "an object", "an object ({...}) as docs/roles describes it"
}
