package ipamrole

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/internal/conffile"
)

// Decode unmarshals JSON into v; a value of the wrong JSON type is a decoding
// error (6) that names the field and what it should be. data may be a file
// a config names (rangeFromFile, whereabouts' flat file): the message never
// quotes it.
func Decode(what string, data []byte, v any) error {
	err := json.Unmarshal(data, v)
	if err == nil {
		return nil
	}
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		field := te.Field
		if field == "" {
			field = what
		}
		kind, _, _ := strings.Cut(te.Value, " ") // "number 5": never the value, which may come from a file
		return cniplug.Errorf(types.ErrDecodingFailure, "config field %q: a JSON %s cannot be read as %s: fix its type", field, kind, jsonKind(te.Type))
	}
	return cniplug.Errorf(types.ErrDecodingFailure, "%s: %s", what, conffile.JSONError(err))
}

// jsonKind names what a Go type expects, in JSON words.
func jsonKind(t reflect.Type) string {
	if t == nil {
		return "this field"
	}
	switch t.Kind() {
	case reflect.Bool:
		return "true or false"
	case reflect.String:
		return "a string"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "a list"
	case reflect.Pointer:
		return jsonKind(t.Elem())
	default:
		return "an object"
	}
}

// Section decodes the "ipam" section of stdin into a new T. Without one,
// the error says what the role reads from it: reads is e.g. "host-local
// reads its ranges".
func Section[T any](a *cniplug.Args, reads string) (*T, error) {
	var raw struct {
		IPAM *T `json:"ipam"`
	}
	if err := Decode("stdin", a.StdinData, &raw); err != nil {
		return nil, err
	}
	if raw.IPAM == nil {
		return nil, cniplug.ConfError("ipam", "missing: %s from the plugin config's \"ipam\" section", reads)
	}
	return raw.IPAM, nil
}
