package ipamrole

import (
	"github.com/cnibox/cnibox/cniplug"
)

// Decode unmarshals JSON into v; a value of the wrong JSON type is a decoding
// error (6) that names the field and what it should be. data may be a file
// a config names (rangeFromFile, whereabouts' flat file): the message never
// quotes it.
func Decode(what string, data []byte, v any) error { return cniplug.DecodeConf(what, data, v) }

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
