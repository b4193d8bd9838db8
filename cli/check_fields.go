package cli

import (
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"strings"

	"github.com/xrash/smetrics"

	"github.com/cnibox/cnibox/cniplug"
)

// fieldTree is what `cnibox check` knows of a config object: its fields,
// each with what its value holds (nil: anything, not looked into).
type fieldTree map[string]*fieldTree

// commonFields are the fields every plugin config may hold, whatever its
// type: the spec's, those a runtime adds (runtimeConfig, prevResult, args,
// GC's attachments), the conflist's that libcni copies in, and cnibox's
// logFile and logLevel, which cniplug reads for every role.
func commonFields() []string {
	return []string{"cniVersion", "cniVersions", "name", "type", "capabilities", "ipam", "dns",
		"runtimeConfig", "args", "prevResult", "cni.dev/valid-attachments", "cni.dev/attachments",
		"logFile", "logLevel"}
}

// listFields are the fields of a conflist's top level.
func listFields() []string {
	return []string{"cniVersion", "cniVersions", "name", "plugins", "disableCheck", "disableGC", "loadOnlyInlinedPlugins"}
}

// knownTree returns the fields of a role's Config structs (nil: the role
// declares none, so nothing of it is checked).
func knownTree(k *cniplug.Known) *fieldTree {
	if k == nil || len(k.Config) == 0 {
		return nil
	}
	t := fieldTree{}
	for _, c := range k.Config {
		addStruct(t, reflect.TypeOf(c), 0)
	}
	return &t
}

// addStruct adds the json fields of struct type typ (through pointers) to t.
func addStruct(t fieldTree, typ reflect.Type, depth int) {
	for typ != nil && typ.Kind() == reflect.Pointer {
		typ = typ.Elem()
	}
	if typ == nil || typ.Kind() != reflect.Struct || depth > 8 {
		return
	}
	for i := 0; i < typ.NumField(); i++ {
		f := typ.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if f.Anonymous && name == "" {
			addStruct(t, f.Type, depth)
			continue
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		t[name] = subTree(f.Type, depth+1)
	}
}

// subTree is what a field of type typ holds: a struct's fields (also as
// the element of lists), or nil for anything else (maps, raw JSON, values).
func subTree(typ reflect.Type, depth int) *fieldTree {
	for typ.Kind() == reflect.Pointer || typ.Kind() == reflect.Slice || typ.Kind() == reflect.Array {
		typ = typ.Elem()
	}
	if typ.Kind() != reflect.Struct || typ == reflect.TypeOf(json.RawMessage{}) {
		return nil
	}
	// A type with its own decoding (netip.Prefix, a duration) is a value.
	if reflect.PointerTo(typ).Implements(reflect.TypeOf((*json.Unmarshaler)(nil)).Elem()) ||
		reflect.PointerTo(typ).Implements(reflect.TypeOf((*interface{ UnmarshalText([]byte) error })(nil)).Elem()) {
		return nil
	}
	t := fieldTree{}
	addStruct(t, typ, depth)
	if len(t) == 0 {
		return nil
	}
	return &t
}

// names returns t's field names, sorted.
func (t fieldTree) names() []string {
	out := make([]string, 0, len(t))
	for n := range t {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// unknownFields walks the JSON value v against t and reports each field t
// does not know, with its path (prefix + ".field") and the nearest known
// name.
func unknownFields(v any, t *fieldTree, prefix string, report func(path, field, nearest string)) {
	if t == nil {
		return
	}
	switch x := v.(type) {
	case []any:
		for i, e := range x {
			unknownFields(e, t, fmt.Sprintf("%s[%d]", prefix, i), report)
		}
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			sub, ok := (*t)[k]
			if !ok {
				report(joinPath(prefix, k), k, nearest(k, t.names()))
				continue
			}
			unknownFields(x[k], sub, joinPath(prefix, k), report)
		}
	}
}

// joinPath appends a field to a path.
func joinPath(prefix, field string) string {
	if prefix == "" {
		return field
	}
	return prefix + "." + field
}

// nearest returns the known name closest to s (Jaro-Winkler, case
// ignored), or "" when none is close enough to be what was meant.
func nearest(s string, known []string) string {
	best, score := "", 0.0
	for _, k := range known {
		if d := smetrics.JaroWinkler(strings.ToLower(s), strings.ToLower(k), 0.7, 4); d > score {
			best, score = k, d
		}
	}
	if score < 0.8 {
		return ""
	}
	return best
}

// merge returns a tree of t's fields and names' (whose values are not
// looked into).
func merge(t *fieldTree, names ...string) *fieldTree {
	out := fieldTree{}
	if t != nil {
		for k, v := range *t {
			out[k] = v
		}
	}
	for _, n := range names {
		if _, ok := out[n]; !ok {
			out[n] = nil
		}
	}
	return &out
}
