package hostlocal

import (
	"encoding/json"
	"errors"
	"reflect"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/cnibox/cnibox/cniplug"
)

// decode unmarshals JSON into v; a value of the wrong JSON type is a decoding
// error (6) that names the field and what it should be.
func decode(what string, data []byte, v any) error {
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
