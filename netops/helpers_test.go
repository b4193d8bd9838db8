package netops_test

import (
	"os"
	"testing"

	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nstest"
)

// openNS creates a namespace for the test and opens a Handle on it; both are
// released when the test ends.
func openNS(t *testing.T, prefix string) *netops.Handle {
	t.Helper()
	path := nstest.NewNS(t, prefix)
	h, err := netops.Open(path)
	if err != nil {
		t.Fatalf("Open(%q): %v", path, err)
	}
	t.Cleanup(func() {
		if err := h.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return h
}

// must fails the test on err.
func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// openNSFile opens a namespace file, e.g. to pass its fd to nftables.
func openNSFile(path string) (*os.File, error) { return os.Open(path) }

// fallbackTunnels are the devices the kernel puts in every new namespace
// once a tunnel module is loaded (ipip's tunl0, sit's sit0, ...): in the
// test VM an earlier test that makes an IPIP device loads ipip, and every
// namespace after it has a tunl0 that no test made.
var fallbackTunnels = map[string]bool{
	"tunl0": true, "sit0": true, "ip6tnl0": true, "gre0": true, "gretap0": true,
	"erspan0": true, "ip6gre0": true, "ip6gretap0": true, "ip6erspan0": true,
	"ip_vti0": true, "ip6_vti0": true,
}

// ownLinks drops the kernel's fallback tunnels from links.
func ownLinks(links []netops.Link) []netops.Link {
	var out []netops.Link
	for _, l := range links {
		if !fallbackTunnels[l.Name] {
			out = append(out, l)
		}
	}
	return out
}
