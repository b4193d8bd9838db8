package ipamrole

import (
	"encoding/json"
	"errors"
	"reflect"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/cnibox/cnibox/cniplug"
)

// Decode unmarshals JSON into v; a value of the wrong JSON type is a decoding
// error (6) that names the field and what it should be.
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
		return cniplug.Errorf(types.ErrDecodingFailure, "config field %q: a JSON %s cannot be read as %s: fix its type", field, te.Value, jsonKind(te.Type))
	}
	return cniplug.Errorf(types.ErrDecodingFailure, "%s: not valid JSON: %v", what, err)
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
