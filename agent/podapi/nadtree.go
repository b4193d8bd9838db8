package podapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"unicode"
)

// A NAD's config is read into a tree that keeps every key as written, in
// order, duplicates included: a map would keep only the last of two equal
// keys, while the roles' decoder (encoding/json into structs) merges both.

// jsonNode is a JSON value: an object (keys and vals), an array (elems) or
// a scalar (str holds a string's value, or a number's or a bool's literal;
// isStr tells a string from those, and from null, whose str is empty).
type jsonNode struct {
	obj, arr bool
	keys     []string
	vals     []*jsonNode
	elems    []*jsonNode
	str      string
	isStr    bool
}

// maxDepth bounds the nesting of a NAD's config.
const maxDepth = 64

// errNotJSON: the config is not one JSON value.
var errNotJSON = errors.New("not one JSON value")

// parseTree reads b, one JSON value.
func parseTree(b []byte) (*jsonNode, error) {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	n, err := readNode(d, 0)
	if err != nil {
		return nil, err
	}
	if _, err := d.Token(); err != io.EOF {
		return nil, errNotJSON
	}
	return n, nil
}

func readNode(d *json.Decoder, depth int) (*jsonNode, error) {
	if depth > maxDepth {
		return nil, fmt.Errorf("nested deeper than %d levels", maxDepth)
	}
	tok, err := d.Token()
	if err != nil {
		return nil, errNotJSON
	}
	switch t := tok.(type) {
	case json.Delim:
		n := &jsonNode{obj: t == '{', arr: t == '['}
		for d.More() {
			if n.obj {
				kt, err := d.Token()
				if err != nil {
					return nil, errNotJSON
				}
				k, _ := kt.(string)
				n.keys = append(n.keys, k)
			}
			v, err := readNode(d, depth+1)
			if err != nil {
				return nil, err
			}
			if n.obj {
				n.vals = append(n.vals, v)
			} else {
				n.elems = append(n.elems, v)
			}
		}
		if _, err := d.Token(); err != nil { // the closing delimiter
			return nil, errNotJSON
		}
		return n, nil
	case string:
		return &jsonNode{str: t, isStr: true}, nil
	case bool:
		return &jsonNode{str: strconv.FormatBool(t)}, nil
	case json.Number:
		return &jsonNode{str: string(t)}, nil
	}
	return &jsonNode{}, nil // null
}

// scalar reports whether n holds no object and no array.
func (n *jsonNode) scalar() bool { return !n.obj && !n.arr }

// get returns the value of the key that folds to key (see fold), and the
// key as written.
func (n *jsonNode) get(key string) (*jsonNode, string) {
	for i, k := range n.keys {
		if fold(k) == key {
			return n.vals[i], k
		}
	}
	return nil, ""
}

// fold maps a key to the one form every key that encoding/json takes for
// the same struct field shares: encoding/json matches a key to a field
// name as bytes.EqualFold does (Unicode simple case folding: "LogFile",
// "LOGFILE", and "ſubnetFile" with a long s, are "logfile" and
// "subnetfile" to it). Each rune becomes the smallest of its folding orbit.
func fold(s string) string {
	out := make([]rune, 0, len(s))
	for _, r := range s {
		min := r
		for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
			if f < min {
				min = f
			}
		}
		out = append(out, min)
	}
	return string(out)
}
