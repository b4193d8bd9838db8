package nodestate

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/containernetworking/cni/libcni"

	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nft"
	"github.com/cnibox/cnibox/store"
)

// TestFindRecordOrphans: rules 5 and 6 of the package documentation. Records of the
// chained and meta roles go only with evidence that their attachment is
// gone; port mapping elements go with a stale record, or when nothing on
// the node accounts for their owner.
func TestFindRecordOrphans(t *testing.T) {
	const boot, old = "boot-now", "boot-before"
	ip := netip.MustParseAddr
	ep := func(cid, netns string) store.Endpoint {
		return store.Endpoint{Network: "net", ContainerID: cid, IfName: "eth0", Netns: netns, BootID: boot}
	}
	pmRec := func(network, cid, bootID, podIP string, port uint16) store.PortMapRecord {
		return store.PortMapRecord{Network: network, ContainerID: cid, IfName: "eth0", BootID: bootID,
			Mappings: []store.PortMapEntry{{Protocol: "tcp", HostPort: port, PodIP: ip(podIP), PodPort: 80}},
			Masq:     []store.PortMasqEntry{{PodIP: ip(podIP)}}}
	}
	elems := func(owner, podIP string, port uint16) nft.PortMaps {
		return nft.PortMaps{Owner: owner,
			Mappings: []nft.PortMapping{{Proto: nft.ProtoTCP, HostPort: port, PodIP: ip(podIP), PodPort: 80}},
			Masq:     []nft.PortMasq{{PodIP: ip(podIP)}}}
	}
	owner := testRoles.PortMapper().Owner
	longCID := strings.Repeat("c", 200) // hashed in the owner comment
	v := View{
		Roles:  testRoles,
		BootID: boot,
		Endpoints: []store.Endpoint{
			ep("live", "/run/netns/live"),
			ep("gone", "/run/netns/gone"),
			ep("live-norec", "/run/netns/live-norec"),
			ep(longCID, "/run/netns/long"),
		},
		Cached: []*libcni.NetworkAttachment{
			{Network: "net", ContainerID: "cached-gone", IfName: "eth0", NetNS: "/run/netns/cached-gone"},
			{Network: "net", ContainerID: "cached-live", IfName: "eth0", NetNS: "/run/netns/cached-live"},
		},
		Links: []netops.Link{
			{Name: "cbw0123456789ab", Kind: "ifb"},    // the stale bandwidth record's
			{Name: "cbwaaaaaaaaaaaa", Kind: "ifb"},    // the live one's
			{Name: "cbwffffffffffff", Kind: "ifb"},    // nobody's: stale
			{Name: "ifb0", Kind: "ifb"},               // not ours
			{Name: "cbw000000000000", Kind: KindVeth}, // not an ifb
		},
		recordView: recordView{
			PortMaps: []store.PortMapRecord{
				pmRec("net", "live", boot, "10.0.0.2", 8080),
				pmRec("net", "gone", boot, "10.0.0.3", 8081),
				pmRec("net", "foreign", boot, "10.0.0.4", 8082),      // no endpoint, no evidence: kept
				pmRec("net", "rebooted", old, "10.0.0.5", 8083),      // earlier boot
				pmRec("net", "cached-gone", boot, "10.0.0.6", 8084),  // the cache says its netns is gone
				pmRec("pmnet", "multi-gone", boot, "10.0.0.7", 8085), // its container's delegate record says so
			},
			Tuning: []store.TuningRecord{
				{Network: "net", ContainerID: "live", IfName: "eth0", Netns: "/run/netns/live", BootID: boot},
				{Network: "net", ContainerID: "tuned-gone", IfName: "eth0", Netns: "/run/netns/tuned-gone", BootID: boot},
				{Network: "net", ContainerID: "foreign", IfName: "eth0", BootID: boot}, // no netns, no evidence
			},
			Bandwidth: []store.BandwidthRecord{
				{Network: "net", ContainerID: "live", IfName: "eth0", Ifb: "cbwaaaaaaaaaaaa", BootID: boot},
				{Network: "net", ContainerID: "gone", IfName: "eth0", Ifb: "cbw0123456789ab", BootID: boot},
			},
			Delegates: []store.DelegateRecord{
				{Network: "flannel", ContainerID: "live", IfName: "eth0", Netns: "/run/netns/live", Plugin: "flannel", BootID: boot},
				{Network: "multinet", ContainerID: "multi-gone", IfName: "eth0", Netns: "/run/netns/multi-gone", Plugin: "multi", BootID: boot},
				{Network: "flannel", ContainerID: "in-flight", IfName: "eth0", Netns: "/run/netns/in-flight", Plugin: "flannel", BootID: boot},
				{Network: "flannel", ContainerID: "old", IfName: "eth0", Plugin: "flannel", BootID: old},
			},
			PortMapElems: []nft.PortMaps{
				elems(owner("net", "live", "eth0"), "10.0.0.2", 8080),
				elems(owner("net", "gone", "eth0"), "10.0.0.3", 8081),                    // with its stale record
				elems(owner("net", "stray", "eth0"), "10.0.0.20", 9000),                  // nothing accounts for it
				elems(owner("net", "live-norec", "eth0"), "10.0.0.21", 9001),             // live endpoint, record lost
				elems(owner("net", "cached-live", "eth0"), "10.0.0.22", 9002),            // live cache entry
				elems(owner("net", "cached-gone", "eth0"), "10.0.0.6", 8084),             // with its stale record
				elems(owner("net", longCID, "eth0"), "10.0.0.23", 9003),                  // hashed owner, live endpoint
				elems(owner("net", strings.Repeat("d", 200), "eth0"), "10.0.0.24", 9004), // hashed, unknown
				elems(owner("net", "in-flight", "eth0"), "10.0.0.25", 9005),              // its container's netns is live
			},
		},
		Netns: map[string]bool{
			"/run/netns/live": true, "/run/netns/gone": false, "/run/netns/live-norec": true, "/run/netns/long": true,
			"/run/netns/cached-gone": false, "/run/netns/cached-live": true, "/run/netns/tuned-gone": false,
			"/run/netns/multi-gone": false, "/run/netns/in-flight": true,
		},
	}
	got := map[string][]string{}
	var staleGone Orphan
	for _, o := range Find(v) {
		if !isRecordKind(o.Kind) {
			continue
		}
		if o.Reason == "" {
			t.Errorf("%s %+v has no reason", o.Kind, o)
		}
		key := o.Network + "/" + o.ContainerID
		switch o.Kind {
		case KindPortMapElem:
			key = strings.Join(o.Ports, ",")
		case KindIfb:
			key = o.Ifb
		}
		got[o.Kind] = append(got[o.Kind], key)
		if o.Kind == KindPortMap && o.ContainerID == "gone" {
			staleGone = o
		}
		if o.Kind == KindBandwidth && o.Ifb != "cbw0123456789ab" {
			t.Errorf("bandwidth orphan %+v: want its ifb cbw0123456789ab", o)
		}
	}
	want := map[string][]string{
		KindPortMap: {"net/gone", "net/rebooted", "net/cached-gone", "pmnet/multi-gone"},
		KindPortMapElem: {
			"*:9000/tcp -> 10.0.0.20:80",
			"*:9004/tcp -> 10.0.0.24:80",
		},
		KindTuning:    {"net/tuned-gone"},
		KindBandwidth: {"net/gone"},
		KindIfb:       {"cbwffffffffffff"},
		KindDelegate:  {"multinet/multi-gone", "flannel/old"},
	}
	for kind, w := range want {
		if !slices.Equal(got[kind], w) {
			t.Errorf("%s orphans = %v, want %v", kind, got[kind], w)
		}
	}
	if len(got) != len(want) {
		t.Errorf("orphan kinds = %v, want %v", got, want)
	}
	// The stale record takes the kernel's elements of its owner along,
	// the kernel's first.
	if len(staleGone.portMaps) != 2 || staleGone.portMaps[0].Owner != owner("net", "gone", "eth0") {
		t.Errorf("stale portmap record's elements = %+v, want the dumped group and the record's", staleGone.portMaps)
	}
	if s := staleGone.Subject(); !strings.Contains(s, "8081") {
		t.Errorf("subject %q does not name the host port", s)
	}
}
