package tap

import (
	"testing"

	"github.com/cnibox/cnibox/roles/internal/roletest"
)

// TestExample: examples/47-tap.conflist loads as a conflist and its tap
// plugin passes tap's checks.
func TestExample(t *testing.T) {
	all := roletest.Example(t, "../../examples/47-tap.conflist")
	if len(all) != 1 || all[0].Conf.Type != "tap" {
		t.Fatalf("examples/47-tap.conflist: plugins %+v, want one tap", all)
	}
	if c, err := parse(all[0]); err != nil || !c.MultiQueue || c.Owner == nil || *c.Owner != 107 {
		t.Errorf("the example's tap plugin: %+v, %v", c, err)
	}
}
