package cniplug

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/containernetworking/cni/pkg/types"
)

// maxDelDrops bounds how many fields ParseForDel leaves out of one config.
const maxDelDrops = 32

// ParseForDel is how a DEL reads its config: with parse, as ADD does, but a
// config that ADD would refuse (an mtu out of range, a bad CIDR in a range,
// an unknown mode: a config error, code 2, 6 or 7, that names its field) is
// no reason to leave a pod's network behind. DEL needs no more of a config
// than what finds what ADD made (and most roles take that from their record
// in the store), so the refused field is left out of the call's config, as
// if it were not written, and parse runs again, until it takes the config
// or refuses it for a reason that names no field; each field left out is a
// warning on stderr. What runs after (the role's DEL, its IPAM delegate)
// sees the config without those fields (a.StdinData, a.Conf).
//
// The fields every config has (name, cniVersion, type) are never left out:
// the call's checks (run) have taken them already.
func ParseForDel[C any](a *Args, parse func(*Args) (C, error)) (C, error) {
	c, err := parse(a)
	for range maxDelDrops {
		if err == nil {
			return c, nil
		}
		path := delRefusedField(err)
		if path == "" {
			return c, err
		}
		stdin, ok := dropField(a.StdinData, path)
		if !ok {
			return c, err
		}
		conf, derr := decodeConf(stdin)
		if derr != nil {
			return c, err
		}
		if a.Stderr != nil {
			fmt.Fprintf(a.Stderr, "cnibox %s DEL: network %q: %v: DEL goes on without %q, as if it were not in the config (fix the config: ADD refuses it)\n",
				a.Conf.Type, a.Conf.Name, err, dropPath(path))
		}
		a.StdinData, a.Conf = stdin, conf
		c, err = parse(a)
	}
	return c, err
}

// delRefusedField is the config path of a config error (code 2, 6 or 7) that
// names one (CodedError.Field), the outermost in err's chain; "" for any
// other error.
func delRefusedField(err error) string {
	switch CodeOf(err) {
	case types.ErrUnsupportedField, types.ErrDecodingFailure, types.ErrInvalidNetworkConfig:
	default:
		return ""
	}
	for e := err; e != nil; e = errors.Unwrap(e) {
		if ce, ok := e.(*CodedError); ok && ce.Field != "" {
			return ce.Field
		}
	}
	return ""
}

// dropPath is the part of a config path that ParseForDel leaves out: the
// path up to its first list index ("ipam.ranges[0][0].subnet" leaves out
// "ipam.ranges": a list stays whole or goes).
func dropPath(path string) string {
	if i := strings.IndexByte(path, '['); i >= 0 {
		return path[:i]
	}
	return path
}

// dropField returns the config stdin without the object member at path
// (see dropPath), and whether there was one to leave out. A key matches as
// encoding/json matches it, case aside, so every member the field would be
// read from goes; the others keep their order and bytes. The members every
// config has (name, cniVersion, type) stay.
func dropField(stdin []byte, path string) ([]byte, bool) {
	keys := strings.Split(dropPath(path), ".")
	if len(keys) == 1 {
		switch strings.ToLower(keys[0]) {
		case "", "name", "cniversion", "type":
			return nil, false
		}
	}
	return dropIn(stdin, keys)
}

// dropIn removes the members at keys from the JSON object obj.
func dropIn(obj []byte, keys []string) ([]byte, bool) {
	dec := json.NewDecoder(bytes.NewReader(obj))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, false
	}
	var b bytes.Buffer
	b.WriteByte('{')
	dropped := false
	for dec.More() {
		tok, err := dec.Token()
		key, ok := tok.(string)
		var val json.RawMessage
		if err != nil || !ok || dec.Decode(&val) != nil {
			return nil, false
		}
		if strings.EqualFold(key, keys[0]) {
			if len(keys) == 1 {
				dropped = true
				continue
			}
			if inner, ok := dropIn(val, keys[1:]); ok {
				val, dropped = inner, true
			}
		}
		if b.Len() > 1 {
			b.WriteByte(',')
		}
		k, err := json.Marshal(key)
		if err != nil {
			return nil, false
		}
		b.Write(k)
		b.WriteByte(':')
		b.Write(val)
	}
	b.WriteByte('}')
	return b.Bytes(), dropped
}
