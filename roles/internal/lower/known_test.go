package lower

import (
	"reflect"
	"slices"
	"strings"
	"testing"
)

// TestFieldGroups: the groups roles declare to cnibox check hold exactly
// Conf's fields, so a field added to Conf fails here until a group (and
// the pages of the kinds that read it) has it.
func TestFieldGroups(t *testing.T) {
	names := func(v any) []string {
		var out []string
		typ := reflect.TypeOf(v)
		for i := 0; i < typ.NumField(); i++ {
			if name, _, _ := strings.Cut(typ.Field(i).Tag.Get("json"), ","); typ.Field(i).IsExported() && name != "" {
				out = append(out, name)
			}
		}
		return out
	}
	var groups []string
	for _, g := range []any{PodFields{}, MasterFields{}, ModeField{}, MACField{}, BCQueueLenField{}} {
		groups = append(groups, names(g)...)
	}
	conf := names(Conf{})
	slices.Sort(groups)
	slices.Sort(conf)
	if !slices.Equal(groups, conf) {
		t.Errorf("the field groups hold %v, Conf %v", groups, conf)
	}
}
