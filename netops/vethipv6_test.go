package netops_test

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nstest"
)

// v6Addrs are the IPv6 addresses of link in h.
func v6Addrs(t *testing.T, h *netops.Handle, link string) []netip.Addr {
	t.Helper()
	all, err := h.AllAddrs(link)
	must(t, err)
	var out []netip.Addr
	for _, p := range all {
		if p.Addr().Is6() {
			out = append(out, p.Addr())
		}
	}
	return out
}

// TestVethIPv6: once the link watch has handled a new pair's carrier (when
// the kernel makes its link-local addresses: the pair of VethIPv6Kernel has
// one on each end then), the pair of VethIPv6None has no IPv6 address on
// either end, and that of VethIPv6LinkLocal has PodLinkLocal(host end)
// alone on its pod end and the kernel's on its host end. A pair asked for
// again over one that exists (a retried ADD) loses the kernel's addresses.
func TestVethIPv6(t *testing.T) {
	host := openNS(t, "v6h")
	isLL := func(a netip.Addr) bool { return a.IsLinkLocalUnicast() }
	for _, tc := range []struct {
		name     string
		mode     netops.VethIPv6
		hostHas  bool         // the host end has a link-local address of the kernel's
		podHas   bool         // the pod end has one of the kernel's
		podExact []netip.Addr // else: the pod end has exactly these
	}{
		{"kernel", netops.VethIPv6Kernel, true, true, nil},
		{"none", netops.VethIPv6None, false, false, []netip.Addr{}},
		{"linklocal", netops.VethIPv6LinkLocal, true, false, []netip.Addr{netops.PodLinkLocal("v6linklocal")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := openNS(t, "v6p")
			hostName := "v6" + tc.name
			_, _, err := host.EnsureVeth(netops.VethOpts{HostName: hostName, PeerName: "eth0", Peer: pod, IPv6: tc.mode})
			must(t, err)
			nstest.WaitLinksUp(t, host.Path())
			nstest.WaitLinksUp(t, pod.Path())
			h, p := v6Addrs(t, host, hostName), v6Addrs(t, pod, "eth0")
			if got := slices.ContainsFunc(h, isLL); got != tc.hostHas || len(h) > 1 {
				t.Errorf("host end's IPv6 addresses: %v, want a link-local one: %v", h, tc.hostHas)
			}
			if tc.podExact == nil {
				if !slices.ContainsFunc(p, isLL) {
					t.Errorf("pod end's IPv6 addresses: %v, want the kernel's link-local one", p)
				}
			} else if !slices.Equal(p, tc.podExact) {
				t.Errorf("pod end's IPv6 addresses: %v, want %v", p, tc.podExact)
			}
			if tc.mode != netops.VethIPv6Kernel {
				return
			}
			// The kernel's pair asked for again without IPv6: an ADD of an
			// attachment without IPv6 that finds its own pair.
			_, _, err = host.EnsureVeth(netops.VethOpts{HostName: hostName, PeerName: "eth0", Peer: pod, IPv6: netops.VethIPv6None})
			must(t, err)
			if h, p := v6Addrs(t, host, hostName), v6Addrs(t, pod, "eth0"); len(h)+len(p) != 0 {
				t.Errorf("the pair made again without IPv6 keeps %v (host end), %v (pod end)", h, p)
			}
		})
	}
}
