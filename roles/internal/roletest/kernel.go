package roletest

import (
	"strings"
	"testing"

	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nstest"
)

// KernelKind checks the answer err of an ADD whose role creates a link of
// kind (netops.LinkKindFeature): inside make test-kernel, whose kernel has
// every kind, the ADD must have succeeded; elsewhere it succeeded, or its
// error says in the one form what the node's kernel lacks ("the node's
// kernel has no 802.1Q VLAN devices (CONFIG_VLAN_8021Q, module 8021q)")
// with CNI code want. It reports whether
// the ADD succeeded (the caller then cleans up).
func KernelKind(t testing.TB, kind string, err error, want uint) bool {
	t.Helper()
	if err == nil {
		return true
	}
	if nstest.InTestKernel() {
		t.Fatalf("ADD of a %s link on the test kernel, which has every kind: %v", kind, err)
	}
	f, ok := netops.LinkKindFeature(kind)
	if !ok {
		t.Fatalf("netops.LinkKindFeature knows no kind %q", kind)
	}
	phrase := "the node's kernel has no " + f.String()
	if !strings.Contains(err.Error(), phrase) {
		t.Fatalf("ADD failed with %v; want a kernel without %s, named as %q", err, kind, phrase)
	}
	if got := Code(err); got != want {
		t.Errorf("code %d, want %d: %v", got, want, err)
	}
	t.Logf("this kernel lacks %s; the ADD said so: %v", f.Name, err)
	return false
}
