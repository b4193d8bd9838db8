package cniplug

import (
	"encoding/json"
	"errors"
	"reflect"
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
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		field := te.Field
		if field == "" {
			field = what
		}
		kind, _, _ := strings.Cut(te.Value, " ") // "number 5": the kind only
		takes, example := jsonWords(te.Type)
		return Errorf(types.ErrDecodingFailure, "config field %q: a JSON %s cannot be read as %s: write it as %s", field, kind, takes, example)
	}
	return Errorf(types.ErrDecodingFailure, "%s: %s", what, conffile.JSONError(err))
}

// JSONKind names what a Go type takes, in JSON words.
func JSONKind(t reflect.Type) string {
	kind, _ := jsonWords(t)
	return kind
}

// jsonWords names what a Go type takes in JSON words (kind) and shows a
// value of that kind (example): one table, so the two always agree.
func jsonWords(t reflect.Type) (kind, example string) {
	if t == nil {
		return "this field", "the documented type"
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
