package nodestate

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"

	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nft"
	"github.com/cnibox/cnibox/roles"
	"github.com/cnibox/cnibox/store"
)

// testRoles are the binary's roles: Find asks their declarations.
var testRoles = roles.Registry()

// hostVethName is the bridge role's host veth of an attachment, as it
// declares it.
func hostVethName(cid, ifname string) string {
	return testRoles.KnownOf("bridge").HostVeth.Name(cid, ifname)
}

// TestFindOrphans: rules 1 to 4 of the package documentation, and what must
// be kept.
func TestFindOrphans(t *testing.T) {
	const boot, old = "boot-now", "boot-before"
	ip := netip.MustParseAddr
	ep := func(cid, netns, bootID string, addr string) store.Endpoint {
		return store.Endpoint{Network: "net", ContainerID: cid, IfName: "eth0", Netns: netns, BootID: bootID,
			HostVeth: hostVethName(cid, "eth0"), IPs: []netip.Prefix{netip.MustParsePrefix(addr + "/24")}}
	}
	res := func(cid, addr, bootID string) store.Reservation {
		return store.Reservation{Network: "net", ContainerID: cid, IfName: "eth0", Addr: ip(addr), BootID: bootID}
	}
	veth := func(name string) netops.Link { return netops.Link{Name: name, Kind: KindVeth} }
	v := View{
		Roles:  testRoles,
		BootID: boot,
		Endpoints: []store.Endpoint{
			ep("live", "/run/netns/live", boot, "10.0.0.2"),
			ep("gone", "/run/netns/gone", boot, "10.0.0.3"),
			ep("rebooted", "/proc/1/ns/net", old, "10.0.0.4"), // the path exists again after the reboot
			ep("no-netns", "", boot, "10.0.0.5"),
		},
		IPAM: []store.IPAMView{{Network: "net", Reservations: []store.Reservation{
			res("live", "10.0.0.2", boot),
			res("gone", "10.0.0.3", boot),
			res("rebooted", "10.0.0.4", old),
			res("no-netns", "10.0.0.5", boot),
			res("hostlocal-only", "10.0.0.10", boot), // no record, no evidence: kept
			res("old-hostlocal", "10.0.0.11", old),   // no record, earlier boot: stale
			res("cached-gone", "10.0.0.12", boot),    // no record, cache says netns gone: stale
			res("cached-live", "10.0.0.13", boot),    // no record, cache says netns live: kept
		}}},
		Cached: []*libcni.NetworkAttachment{
			{Network: "net", ContainerID: "cached-gone", IfName: "eth0", NetNS: "/run/netns/cached-gone"},
			{Network: "net", ContainerID: "cached-live", IfName: "eth0", NetNS: "/run/netns/cached-live"},
			{Network: "net", ContainerID: "no-ipam", IfName: "eth0", NetNS: "/run/netns/no-ipam"},
		},
		Links: []netops.Link{
			veth(hostVethName("live", "eth0")),
			veth(hostVethName("gone", "eth0")),           // still there: the netns is held elsewhere
			veth(hostVethName("hostlocal-only", "eth0")), // an ADD in flight: kept
			veth(hostVethName("no-ipam", "eth0")),        // in the runtime's cache, live: kept
			veth("cbx0123456789ab"),                      // nobody's: stale
			veth("veth12345"),                            // not ours
			{Name: "cbxabcdefabcdef", Kind: "bridge"},    // not a veth
		},
		Masq: []nft.MasqEntry{
			{PodIP: ip("10.0.0.2"), Network: "net"},
			{PodIP: ip("10.0.0.3"), Network: "net"},
			{PodIP: ip("10.0.0.10"), Network: "net"}, // reserved: kept
			{PodIP: ip("10.0.0.99"), Network: "net"}, // nobody's
		},
		Netns: map[string]bool{
			"/run/netns/live": true, "/run/netns/gone": false, "/proc/1/ns/net": true,
			"/run/netns/cached-gone": false, "/run/netns/cached-live": true, "/run/netns/no-ipam": true,
		},
	}
	got := map[string][]string{}
	for _, o := range Find(v) {
		key := o.ContainerID
		switch o.Kind {
		case "veth":
			key = o.Veth
		case "masquerade", "reservation":
			key = o.Addr.String()
		}
		if o.Reason == "" {
			t.Errorf("%s %s has no reason", o.Kind, key)
		}
		got[o.Kind] = append(got[o.Kind], key)
	}
	want := map[string][]string{
		"endpoint":    {"gone", "rebooted"},
		"reservation": {"10.0.0.3", "10.0.0.4", "10.0.0.11", "10.0.0.12"},
		"veth":        {hostVethName("gone", "eth0"), "cbx0123456789ab"},
		"masquerade":  {"10.0.0.3", "10.0.0.99"},
	}
	for kind, w := range want {
		if !slices.Equal(got[kind], w) {
			t.Errorf("%s orphans = %v, want %v", kind, got[kind], w)
		}
	}
	if len(got) != len(want) {
		t.Errorf("orphan kinds = %v, want %v", got, want)
	}
}

// TestFindOrphansUnknownNetns: a netns whose state could not be read counts
// as live, so nothing of it is removed.
func TestFindOrphansUnknownNetns(t *testing.T) {
	v := View{BootID: "b", Endpoints: []store.Endpoint{{Network: "n", ContainerID: "c", IfName: "eth0", Netns: "/run/netns/x", BootID: "b"}}}
	if o := Find(v); len(o) != 0 {
		t.Errorf("Find with an unprobed netns = %+v, want none", o)
	}
}

// TestFindOrphansUnfinishedADD: rules 1c and 2c. A record of a container
// the runtime's cache does not know, older than AddGrace, is one whose ADD
// failed and whose DEL never reached it (its netns may be alive): stale, and
// so are its address and veth. Kept: one younger than AddGrace (an ADD in
// flight), one whose container is cached (in any network), one a meta
// role's delegate record names, one store rebuild made, and everything when
// no cache was read or the cache is empty.
func TestFindOrphansUnfinishedADD(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	old, young := now.Add(-AddGrace-time.Second), now.Add(-time.Minute)
	ep := func(cid, addr string, created time.Time) store.Endpoint {
		return store.Endpoint{Network: "net", ContainerID: cid, IfName: "eth0", Netns: "/run/netns/" + cid, BootID: "b", Created: created,
			HostVeth: hostVethName(cid, "eth0"), IPs: []netip.Prefix{netip.MustParsePrefix(addr + "/24")}}
	}
	res := func(cid, addr string, created time.Time) store.Reservation {
		return store.Reservation{Network: "net", ContainerID: cid, IfName: "eth0", Addr: netip.MustParseAddr(addr), BootID: "b", Created: created}
	}
	rebuilt := ep("rebuilt-cbx", "10.0.0.7", old)
	rebuilt.Extra = map[string]string{"rebuilt": "cnibox store rebuild, from config"}
	v := View{
		Roles: testRoles, BootID: "b", Now: now,
		Endpoints: []store.Endpoint{
			ep("failed", "10.0.0.2", old), ep("in-flight", "10.0.0.3", young), ep("cached", "10.0.0.4", old),
			ep("multus-delegate", "10.0.0.5", old), ep("delegated", "10.0.0.6", old), rebuilt,
		},
		IPAM: []store.IPAMView{{Network: "net", Reservations: []store.Reservation{
			res("failed", "10.0.0.2", old), res("in-flight", "10.0.0.3", young), res("cached", "10.0.0.4", old),
			res("multus-delegate", "10.0.0.5", old), res("delegated", "10.0.0.6", old), res("rebuilt-cbx", "10.0.0.7", old),
			res("hl-failed", "10.0.0.10", old),      // no record (host-local under another main plugin)
			res("hl-in-flight", "10.0.0.11", young), // no record, young
		}}},
		Cached: []*libcni.NetworkAttachment{
			{Network: "net", ContainerID: "cached", IfName: "eth0", NetNS: "/run/netns/cached"},
			{Network: "multus-network", ContainerID: "multus-delegate", IfName: "eth0", NetNS: "/run/netns/multus-delegate"},
		},
		roleView: roleView{Records: map[string][]store.RawRecord{"delegate": {raw(t, map[string]any{"network": "meta", "containerID": "delegated",
			"ifName": "eth0", "netns": "/run/netns/delegated", "bootID": "b"})}}},
		Links: []netops.Link{{Name: hostVethName("failed", "eth0"), Kind: KindVeth}, {Name: hostVethName("in-flight", "eth0"), Kind: KindVeth}},
		Netns: map[string]bool{},
	}
	for _, cid := range []string{"failed", "in-flight", "cached", "multus-delegate", "delegated", "rebuilt-cbx"} {
		v.Netns["/run/netns/"+cid] = true
	}
	find := func(v View) map[string][]string {
		got := map[string][]string{}
		for _, o := range Find(v) {
			key := o.ContainerID
			if o.Kind == KindVeth {
				key = o.Veth
			}
			got[o.Kind] = append(got[o.Kind], key)
		}
		return got
	}
	got := find(v)
	want := map[string][]string{
		KindEndpoint:    {"failed"},
		KindReservation: {"failed", "hl-failed"},
		KindVeth:        {hostVethName("failed", "eth0")},
	}
	for kind, w := range want {
		if !slices.Equal(got[kind], w) {
			t.Errorf("%s orphans = %v, want %v", kind, got[kind], w)
		}
	}
	if len(got) != len(want) {
		t.Errorf("orphans = %v, want %v", got, want)
	}
	for _, o := range Find(v) {
		if o.Kind == KindEndpoint && !strings.Contains(o.Reason, "ADD never completed") {
			t.Errorf("reason %q does not say the ADD never completed", o.Reason)
		}
	}
	v.Cached = nil // no cache read (gc --cache-dir ''), or the runtime caches elsewhere
	if got := find(v); len(got) != 0 {
		t.Errorf("without a cache: %v, want nothing", got)
	}
	v.Cached, v.Now = []*libcni.NetworkAttachment{{Network: "net", ContainerID: "cached", IfName: "eth0"}}, time.Time{}
	if got := find(v); len(got) != 0 {
		t.Errorf("without a time: %v, want nothing", got)
	}
}
