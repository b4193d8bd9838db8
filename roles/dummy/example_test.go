package dummy

import (
	"testing"

	"github.com/cnibox/cnibox/roles/internal/roletest"
)

// TestExample: examples/45-dummy.conflist loads as a conflist and its dummy
// plugin passes dummy's checks.
func TestExample(t *testing.T) {
	all := roletest.Example(t, "../../examples/45-dummy.conflist")
	if len(all) != 1 || all[0].Conf.Type != "dummy" {
		t.Fatalf("examples/45-dummy.conflist: plugins %+v, want one dummy", all)
	}
	if err := need(all[0]); err != nil {
		t.Errorf("the example's dummy plugin: %v", err)
	}
}
