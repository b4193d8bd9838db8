package nodestate

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/containernetworking/cni/libcni"

	"github.com/cnibox/cnibox/cniplug"
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
	pmRec := func(network, cid, bootID, podIP string, port uint16) store.RawRecord {
		return raw(t, map[string]any{"network": network, "containerID": cid, "ifName": "eth0", "bootID": bootID,
			"mappings": []map[string]any{{"protocol": "tcp", "hostPort": port, "podIP": podIP, "podPort": 80}},
			"masq":     []map[string]any{{"podIP": podIP}}})
	}
	rec := func(network, cid, netns, plugin, bootID, ifb string) store.RawRecord {
		return raw(t, map[string]any{"network": network, "containerID": cid, "ifName": "eth0", "netns": netns, "plugin": plugin, "bootID": bootID, "ifb": ifb})
	}
	elems := func(owner, podIP string, port uint16) nft.PortMaps {
		return nft.PortMaps{Owner: owner,
			Mappings: []nft.PortMapping{{Proto: nft.ProtoTCP, HostPort: port, PodIP: ip(podIP), PodPort: 80}},
			Masq:     []nft.PortMasq{{PodIP: ip(podIP)}}}
	}
	owner := portMapOwner
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
		roleView: roleView{
			Records: map[string][]store.RawRecord{
				"portmap": {
					pmRec("net", "live", boot, "10.0.0.2", 8080),
					pmRec("net", "gone", boot, "10.0.0.3", 8081),
					pmRec("net", "foreign", boot, "10.0.0.4", 8082),      // no endpoint, no evidence: kept
					pmRec("net", "rebooted", old, "10.0.0.5", 8083),      // earlier boot
					pmRec("net", "cached-gone", boot, "10.0.0.6", 8084),  // the cache says its netns is gone
					pmRec("pmnet", "multi-gone", boot, "10.0.0.7", 8085), // its container's delegate record says so
				},
				"tuning": {
					rec("net", "live", "/run/netns/live", "", boot, ""),
					rec("net", "tuned-gone", "/run/netns/tuned-gone", "", boot, ""),
					rec("net", "foreign", "", "", boot, ""), // no netns, no evidence
				},
				"bandwidth": {
					rec("net", "live", "", "", boot, "cbwaaaaaaaaaaaa"),
					rec("net", "gone", "", "", boot, "cbw0123456789ab"),
				},
				"delegate": {
					rec("flannel", "live", "/run/netns/live", "flannel", boot, ""),
					rec("multinet", "multi-gone", "/run/netns/multi-gone", "multi", boot, ""),
					rec("flannel", "in-flight", "/run/netns/in-flight", "flannel", boot, ""),
					rec("flannel", "old", "", "flannel", old, ""),
				},
			},
			Kernel: map[*cniplug.Leftovers]any{leftoversOf(t, "portmap-elements"): []nft.PortMaps{
				elems(owner("net", "live", "eth0"), "10.0.0.2", 8080),
				elems(owner("net", "gone", "eth0"), "10.0.0.3", 8081),                    // with its stale record
				elems(owner("net", "stray", "eth0"), "10.0.0.20", 9000),                  // nothing accounts for it
				elems(owner("net", "live-norec", "eth0"), "10.0.0.21", 9001),             // live endpoint, record lost
				elems(owner("net", "cached-live", "eth0"), "10.0.0.22", 9002),            // live cache entry
				elems(owner("net", "cached-gone", "eth0"), "10.0.0.6", 8084),             // with its stale record
				elems(owner("net", longCID, "eth0"), "10.0.0.23", 9003),                  // hashed owner, live endpoint
				elems(owner("net", strings.Repeat("d", 200), "eth0"), "10.0.0.24", 9004), // hashed, unknown
				elems(owner("net", "in-flight", "eth0"), "10.0.0.25", 9005),              // its container's netns is live
			}},
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
		if slices.Contains(nodeKinds, o.Kind) {
			continue
		}
		if o.Reason == "" {
			t.Errorf("%s %+v has no reason", o.Kind, o)
		}
		key := o.Network + "/" + o.ContainerID
		switch o.Kind {
		case "portmap-elements":
			key = strings.Join(o.Ports, ",")
		case "ifb":
			key = o.Device
		}
		got[o.Kind] = append(got[o.Kind], key)
		if o.Kind == "portmap" && o.ContainerID == "gone" {
			staleGone = o
		}
		if o.Kind == "bandwidth" && o.Device != "cbw0123456789ab" {
			t.Errorf("bandwidth orphan %+v: want its ifb cbw0123456789ab", o)
		}
	}
	want := map[string][]string{
		"portmap": {"net/gone", "net/rebooted", "net/cached-gone", "pmnet/multi-gone"},
		"portmap-elements": {
			"*:9000/tcp -> 10.0.0.20:80",
			"*:9004/tcp -> 10.0.0.24:80",
		},
		"tuning":    {"net/tuned-gone"},
		"bandwidth": {"net/gone"},
		"ifb":       {"cbwffffffffffff"},
		"delegate":  {"multinet/multi-gone", "flannel/old"},
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
	if pms, _ := staleGone.Kernel.([]nft.PortMaps); len(pms) != 2 || pms[0].Owner != owner("net", "gone", "eth0") {
		t.Errorf("stale portmap record's elements = %+v, want the dumped group and the record's", staleGone.Kernel)
	}
	if s := staleGone.Subject(); !strings.Contains(s, "8081") {
		t.Errorf("subject %q does not name the host port", s)
	}
}

// raw is a role's record as the store keeps it and RawRecords reads it.
func raw(t *testing.T, rec map[string]any) store.RawRecord {
	t.Helper()
	b, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	var r store.RawRecord
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	r.JSON = b
	return r
}

// leftoversOf is the declaration of the role whose leftovers include kind.
func leftoversOf(t *testing.T, kind string) *cniplug.Leftovers {
	t.Helper()
	for _, l := range testRoles.Leftovers() {
		if slices.Contains(l.Kinds, kind) {
			return l
		}
	}
	t.Fatalf("no role declares leftovers of kind %q", kind)
	return nil
}

// portMapOwner is the owner comment the port mapping role gives an
// attachment's elements ("<network> <containerID> <ifname>", a part too
// long for the comment replaced by "#" and 32 hex digits of its sha256);
// the test builds elements of the kernel with it.
func portMapOwner(network, containerID, ifname string) string {
	token := func(s string, max int) string {
		if len(s) <= max {
			return s
		}
		sum := sha256.Sum256([]byte(s))
		return "#" + hex.EncodeToString(sum[:16])
	}
	return token(network, 100) + " " + token(containerID, 128) + " " + ifname
}
