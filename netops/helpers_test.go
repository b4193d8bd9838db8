package netops_test

import (
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/internal/labtest"
)

// openNS creates a namespace for the test and opens a Handle on it; both are
// released when the test ends.
var openNS = labtest.OpenNS

// must fails the test on err.
var must = labtest.Must

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
