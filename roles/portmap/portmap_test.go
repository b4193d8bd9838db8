package portmap_test

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/internal/testenv"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/roles/portmap"
	"github.com/cnibox/cnibox/store"
)

var (
	pmGW4 = netip.MustParseAddr("10.212.1.1")
	pmGW6 = netip.MustParseAddr("fd00:212:1::1")
)

// TestPortmapTraffic: a pod behind the bridge serves HTTP on :80, mapped to
// host port 8080. It is reached from another host, from the node on its
// addresses and on 127.0.0.1, and from the pod itself (hairpin), over IPv4
// and IPv6; a UDP port too. A mapping with a hostIP of the node (8081 on
// 192.168.212.1, 8083 on fd00:212::1, 8082 on 127.0.0.1) is reached on that
// address from each of them, and not on the node's other addresses. After
// DEL (twice) every path fails.
func TestPortmapTraffic(t *testing.T) {
	n := newPMNode(t)
	p := n.newPod("web")
	maps := []pmMap{
		{HostPort: 8080, ContainerPort: 80},
		{HostPort: 8081, ContainerPort: 80, Protocol: "TCP", HostIP: pmNodeIP4.String()},
		{HostPort: 5300, ContainerPort: 53, Protocol: "udp"},
		{HostPort: 8082, ContainerPort: 80, HostIP: "127.0.0.1"},
		{HostPort: 8083, ContainerPort: 80, HostIP: pmNodeIP6.String()},
	}
	prev := n.up(p, "1.1.0", maps, nil)
	pod4, pod6 := pmPodAddr(t, prev, true), pmPodAddr(t, prev, false)
	pmServeHTTP(t, p, 80)
	pmServeUDP(t, p, 53)

	paths := []struct {
		name string
		from string // "" = the node
		to   netip.Addr
		port int
		seen netip.Addr // the client address the pod sees
	}{
		{"remote host, IPv4", n.remote, pmNodeIP4, 8080, pmRemoteIP4},
		{"remote host, IPv6", n.remote, pmNodeIP6, 8080, pmRemoteIP6},
		{"remote host, host IP mapping", n.remote, pmNodeIP4, 8081, pmRemoteIP4},
		{"node, its address", "", pmNodeIP4, 8080, pmNodeIP4},
		{"node, its IPv6 address", "", pmNodeIP6, 8080, pmNodeIP6},
		{"node, the bridge address", "", pmGW4, 8080, pmGW4},
		{"node, 127.0.0.1", "", netip.MustParseAddr("127.0.0.1"), 8080, pmGW4},
		{"node, 127.0.0.1 host IP mapping", "", netip.MustParseAddr("127.0.0.1"), 8081, netip.Addr{}}, // 8081 is on 192.168.212.1 only
		{"node, host IP mapping", "", pmNodeIP4, 8081, pmNodeIP4},
		{"node, host IP mapping, other address", "", pmGW4, 8081, netip.Addr{}},
		{"node, host IP 127.0.0.1", "", netip.MustParseAddr("127.0.0.1"), 8082, pmGW4},
		{"node, host IP 127.0.0.1, other address", "", pmNodeIP4, 8082, netip.Addr{}},
		{"remote host, IPv6 host IP mapping", n.remote, pmNodeIP6, 8083, pmRemoteIP6},
		{"node, IPv6 host IP mapping", "", pmNodeIP6, 8083, pmNodeIP6},
		{"remote host, IPv6 host IP mapping, IPv4", n.remote, pmNodeIP4, 8083, netip.Addr{}},
		{"hairpin, IPv4", p.netns, pmNodeIP4, 8080, pmGW4},
		{"hairpin, IPv6", p.netns, pmNodeIP6, 8080, pmGW6},
		{"hairpin, gateway", p.netns, pmGW4, 8080, pmGW4},
		{"hairpin, host IP mapping", p.netns, pmNodeIP4, 8081, pmGW4},
		{"hairpin, IPv6 host IP mapping", p.netns, pmNodeIP6, 8083, pmGW6},
	}
	for _, tc := range paths {
		t.Run(tc.name, func(t *testing.T) {
			body, err := pmGet(t, tc.from, tc.to, tc.port)
			if !tc.seen.IsValid() {
				if err == nil {
					t.Fatalf("GET %s:%d reached %q; want no mapping", tc.to, tc.port, body)
				}
				return
			}
			if err != nil {
				t.Fatalf("GET %s:%d: %v", tc.to, tc.port, err)
			}
			if want := p.id + " " + tc.seen.String(); body != want {
				t.Errorf("GET %s:%d = %q, want %q", tc.to, tc.port, body, want)
			}
		})
	}
	t.Run("udp from the remote host", func(t *testing.T) {
		for _, to := range []netip.Addr{pmNodeIP4, pmNodeIP6} {
			got, err := pmEchoUDP(t, n.remote, to, 5300)
			if err != nil || got != p.id+" ping" {
				t.Errorf("UDP %s:5300 = %q, %v", to, got, err)
			}
		}
	})

	t.Run("elements and record", func(t *testing.T) {
		o := pmOwnerOf(n.network, p)
		es := pmEntries(t)[o]
		if len(es.Mappings) != 7 || len(es.Masq) != 2 {
			t.Errorf("elements of %q = %+v; want 7 mappings (2 tcp, 3 host IP, 2 udp) and 2 masquerade entries", o, es)
		}
		for _, m := range es.Mappings {
			if m.PodIP != pod4 && m.PodIP != pod6 {
				t.Errorf("mapping %s is not to the pod's addresses %s, %s", m, pod4, pod6)
			}
		}
		if r, ok := n.records()[p.id]; !ok || len(r.Mappings) != 7 {
			t.Errorf("record = %+v, %v", r, ok)
		}
		lo := pmSysctl(t, "net/ipv4/conf/"+n.bridge+"/route_localnet")
		if lo != "1" {
			t.Errorf("route_localnet on %s = %q, want 1", n.bridge, lo)
		}
	})

	t.Run("check", func(t *testing.T) {
		n.must(portmap.Role, "CHECK", p, n.portmapConf("1.1.0", maps, prev, nil))
		// Another mapping than the one set up: CHECK fails.
		other := append([]pmMap{{HostPort: 9999, ContainerPort: 80}}, maps...)
		if _, err := n.call(portmap.Role, "CHECK", p, n.portmapConf("1.1.0", other, prev, nil)); err == nil {
			t.Error("CHECK with a mapping that was not set up succeeded")
		}
	})

	n.down(p, "1.1.0", maps, prev)
	t.Run("after DEL", func(t *testing.T) {
		for _, tc := range paths[:4] {
			if body, err := pmGet(t, tc.from, tc.to, tc.port); err == nil {
				t.Errorf("%s: GET %s:%d after DEL reached %q", tc.name, tc.to, tc.port, body)
			}
		}
		if es, ok := pmEntries(t)[pmOwnerOf(n.network, p)]; ok {
			t.Errorf("elements after DEL: %+v", es)
		}
		if r, ok := n.records()[p.id]; ok {
			t.Errorf("record after DEL: %+v", r)
		}
	})
}

func pmSysctl(t *testing.T, key string) string {
	t.Helper()
	h, err := netops.Open("")
	pmMust(t, err)
	defer h.Close()
	v, err := h.Sysctl(key)
	pmMust(t, err)
	return v
}

// TestPortmapVersions: ADD returns prevResult unchanged, CHECK passes and
// DEL (twice) cleans up, for every spec version.
func TestPortmapVersions(t *testing.T) {
	n := newPMNode(t)
	maps := []pmMap{{HostPort: 8180, ContainerPort: 80}, {HostPort: 8180, ContainerPort: 80, Protocol: "sctp"}}
	for i, v := range cniplug.SupportedVersions {
		t.Run(v, func(t *testing.T) {
			p := n.newPod("v")
			ms := []pmMap{{HostPort: maps[0].HostPort + i, ContainerPort: 80}, {HostPort: maps[1].HostPort + i, ContainerPort: 80, Protocol: "sctp"}}
			prev := n.up(p, v, ms, nil)
			pmServeHTTP(t, p, 80)
			if body, err := pmGet(t, n.remote, pmNodeIP4, 8180+i); err != nil || !strings.HasPrefix(body, p.id+" ") {
				t.Errorf("GET %s:%d = %q, %v", pmNodeIP4, 8180+i, body, err)
			}
			if v >= "0.4.0" {
				n.must(portmap.Role, "CHECK", p, n.portmapConf(v, ms, prev, nil))
			}
			if v == "1.1.0" {
				n.must(portmap.Role, "STATUS", p, n.portmapConf(v, nil, nil, nil))
			}
			n.down(p, v, ms, prev)
			if es, ok := pmEntries(t)[pmOwnerOf(n.network, p)]; ok {
				t.Errorf("elements after DEL: %+v", es)
			}
		})
	}
}

// TestPortmapDelWithoutPrevResult: DEL works from the record when the
// runtime sends neither prevResult nor a netns, and from the elements'
// comments when the record is gone too.
func TestPortmapDelWithoutPrevResult(t *testing.T) {
	n := newPMNode(t)
	maps := []pmMap{{HostPort: 8280, ContainerPort: 80}, {HostPort: 8281, ContainerPort: 81, Protocol: "udp"}}

	t.Run("record", func(t *testing.T) {
		p := n.newPod("norec")
		prev := n.up(p, "1.0.0", maps, nil)
		gone := pmPod{id: p.id} // CNI_NETNS empty: the namespace is gone
		for range 2 {
			n.must(portmap.Role, "DEL", gone, n.portmapConf("1.0.0", nil, nil, nil))
		}
		if es, ok := pmEntries(t)[pmOwnerOf(n.network, p)]; ok {
			t.Errorf("elements after DEL: %+v", es)
		}
		if _, ok := n.records()[p.id]; ok {
			t.Error("record after DEL")
		}
		n.down(p, "1.0.0", maps, prev)
	})

	t.Run("no record", func(t *testing.T) {
		p := n.newPod("nonothing")
		prev := n.up(p, "1.0.0", maps, nil)
		st, err := store.Open(n.dir)
		pmMust(t, err)
		pmMust(t, portmap.Records.Update(st, func(tx store.KindTx[portmap.Record]) error { return tx.Delete(n.network, p.id, "eth0") }))
		st.Close()
		gone := pmPod{id: p.id}
		for range 2 {
			n.must(portmap.Role, "DEL", gone, n.portmapConf("1.0.0", maps, nil, nil))
		}
		if es, ok := pmEntries(t)[pmOwnerOf(n.network, p)]; ok {
			t.Errorf("elements after DEL: %+v", es)
		}
		n.down(p, "1.0.0", maps, prev)
	})
}

// TestPortmapTakeOver: a second pod mapping the same host port takes it
// over (the newest wins); the first pod's DEL leaves it alone.
func TestPortmapTakeOver(t *testing.T) {
	n := newPMNode(t)
	maps := []pmMap{{HostPort: 8380, ContainerPort: 80}, {HostPort: 8381, ContainerPort: 80}}
	a, b := n.newPod("first"), n.newPod("second")
	prevA := n.up(a, "1.0.0", maps, nil)
	pmServeHTTP(t, a, 80)
	prevB := n.up(b, "1.0.0", maps[:1], nil)
	pmServeHTTP(t, b, 80)
	want := map[int]pmPod{8380: b, 8381: a}
	check := func(when string) {
		t.Helper()
		for port, p := range want {
			body, err := pmGet(t, n.remote, pmNodeIP4, port)
			if err != nil || !strings.HasPrefix(body, p.id+" ") {
				t.Errorf("%s: GET :%d = %q, %v; want pod %s", when, port, body, err, p.id)
			}
		}
	}
	check("after the second ADD")
	if r := n.records()[a.id]; len(r.Mappings) != 2 { // 8381 over IPv4 and IPv6
		t.Errorf("first pod's record after the take-over: %+v; want only 8381", r.Mappings)
	}
	n.down(a, "1.0.0", maps, prevA)
	delete(want, 8381)
	check("after the first pod's DEL")
	n.down(b, "1.0.0", maps[:1], prevB)
	if es := pmEntries(t); len(es) != 0 {
		t.Errorf("elements after both DELs: %+v", es)
	}
}

// TestPortmapGC: GC removes the mappings of attachments not in the valid
// list, whether they have a record or only elements, and keeps the others.
func TestPortmapGC(t *testing.T) {
	n := newPMNode(t)
	keep, stale, orphan := n.newPod("keep"), n.newPod("stale"), n.newPod("orphan")
	prevs := map[string][]byte{}
	for i, p := range []pmPod{keep, stale, orphan} {
		prevs[p.id] = n.up(p, "1.1.0", []pmMap{{HostPort: 8480 + i, ContainerPort: 80}}, nil)
	}
	// The orphan has elements but no record.
	st, err := store.Open(n.dir)
	pmMust(t, err)
	pmMust(t, portmap.Records.Update(st, func(tx store.KindTx[portmap.Record]) error { return tx.Delete(n.network, orphan.id, "eth0") }))
	st.Close()

	gc := pmWithKeep(t, n.portmapConf("1.1.0", nil, nil, nil), keep)
	for range 2 {
		n.must(portmap.Role, "GC", pmPod{}, gc)
	}
	es := pmEntries(t)
	if _, ok := es[pmOwnerOf(n.network, keep)]; !ok {
		t.Errorf("GC removed the kept attachment's mappings: %v", es)
	}
	for _, p := range []pmPod{stale, orphan} {
		if e, ok := es[pmOwnerOf(n.network, p)]; ok {
			t.Errorf("mappings of %s after GC: %+v", p.id, e)
		}
	}
	recs := n.records()
	if _, ok := recs[stale.id]; ok || len(recs) != 1 {
		t.Errorf("records after GC: %v; want only %s", recs, keep.id)
	}
	pmServeHTTP(t, keep, 80)
	if body, err := pmGet(t, n.remote, pmNodeIP4, 8480); err != nil || !strings.HasPrefix(body, keep.id) {
		t.Errorf("GET of the kept pod after GC = %q, %v", body, err)
	}
	for i, p := range []pmPod{keep, stale, orphan} {
		n.down(p, "1.1.0", []pmMap{{HostPort: 8480 + i, ContainerPort: 80}}, prevs[p.id])
	}
}

// TestPortmapMasqAll: with masqAll the pod sees every forwarded connection
// from the node's address; with snat false there is no masquerade entry.
func TestPortmapMasqAll(t *testing.T) {
	n := newPMNode(t)
	p, q := n.newPod("masqall"), n.newPod("nosnat")
	prevP := n.up(p, "1.0.0", []pmMap{{HostPort: 8580, ContainerPort: 80}}, map[string]any{"masqAll": true})
	prevQ := n.up(q, "1.0.0", []pmMap{{HostPort: 8581, ContainerPort: 80}}, map[string]any{"snat": false})
	pmServeHTTP(t, p, 80)
	pmServeHTTP(t, q, 80)
	if body, err := pmGet(t, n.remote, pmNodeIP4, 8580); err != nil || body != p.id+" "+pmGW4.String() {
		t.Errorf("masqAll: GET from the remote host = %q, %v; want it seen from %s", body, err, pmGW4)
	}
	if body, err := pmGet(t, n.remote, pmNodeIP4, 8581); err != nil || body != q.id+" "+pmRemoteIP4.String() {
		t.Errorf("snat false: GET from the remote host = %q, %v", body, err)
	}
	if e := pmEntries(t)[pmOwnerOf(n.network, q)]; len(e.Masq) != 0 || len(e.Mappings) != 2 {
		t.Errorf("snat false: elements %+v; want 2 mappings, no masquerade entry", e)
	}
	n.down(p, "1.0.0", []pmMap{{HostPort: 8580, ContainerPort: 80}}, prevP)
	n.down(q, "1.0.0", []pmMap{{HostPort: 8581, ContainerPort: 80}}, prevQ)
}

// TestPortmapConfig: invalid and unsupported fields fail ADD with the right
// code and a message naming the field; DEL of such a config succeeds.
func TestPortmapConfig(t *testing.T) {
	prev := []byte(`{"cniVersion":"1.0.0","interfaces":[{"name":"eth0","sandbox":"/x"}],"ips":[{"address":"10.9.0.5/24","interface":0}]}`)
	n := &pmNode{t: t, dir: t.TempDir(), network: "cfgnet"}
	tests := []struct {
		name  string
		maps  []pmMap
		extra map[string]any
		code  uint
		field string
	}{
		{"host port 0", []pmMap{{HostPort: 0, ContainerPort: 80}}, nil, types.ErrInvalidNetworkConfig, "portMappings[0].hostPort"},
		{"host port too big", []pmMap{{HostPort: 70000, ContainerPort: 80}}, nil, types.ErrInvalidNetworkConfig, "hostPort"},
		{"container port", []pmMap{{HostPort: 80, ContainerPort: -1}}, nil, types.ErrInvalidNetworkConfig, "portMappings[0].containerPort"},
		{"protocol", []pmMap{{HostPort: 80, ContainerPort: 80, Protocol: "icmp"}}, nil, types.ErrUnsupportedField, "protocol"},
		{"host IP", []pmMap{{HostPort: 80, ContainerPort: 80}, {HostPort: 81, ContainerPort: 80, HostIP: "nope"}}, nil, types.ErrInvalidNetworkConfig, "portMappings[1].hostIP"},
		{"same host port twice", []pmMap{{HostPort: 80, ContainerPort: 80}, {HostPort: 80, ContainerPort: 81}}, nil, types.ErrInvalidNetworkConfig, "portMappings[1]"},
		{"mark bit", nil, map[string]any{"markMasqBit": 40}, types.ErrInvalidNetworkConfig, "markMasqBit"},
		{"mark bit and chain", nil, map[string]any{"markMasqBit": 3, "externalSetMarkChain": "KUBE-MARK-MASQ"}, types.ErrInvalidNetworkConfig, "externalSetMarkChain"},
		{"external chain", nil, map[string]any{"externalSetMarkChain": "KUBE-MARK-MASQ"}, types.ErrUnsupportedField, "externalSetMarkChain"},
		{"conditions", nil, map[string]any{"conditionsV4": []string{"-d", "10.0.0.0/8"}}, types.ErrUnsupportedField, "conditionsV4"},
		{"backend", nil, map[string]any{"backend": "ebpf"}, types.ErrUnsupportedField, "backend"},
		{"no prevResult", []pmMap{{HostPort: 80, ContainerPort: 80}}, map[string]any{"prevResult": nil}, types.ErrInvalidNetworkConfig, "prevResult"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			conf := n.portmapConf("1.0.0", tt.maps, prev, tt.extra)
			_, err := n.call(portmap.Role, "ADD", pmPod{id: "c1", netns: "/x"}, conf)
			var ce *cniplug.CodedError
			if !errors.As(err, &ce) || ce.Code != tt.code || !strings.Contains(err.Error(), tt.field) {
				t.Fatalf("ADD error = %v (code %d); want code %d naming %q", err, cniplug.CodeOf(err), tt.code, tt.field)
			}
			if !testenv.Root() {
				return // DEL reads the node's nftables: root's (make check checks ADD only)
			}
			if _, err := n.call(portmap.Role, "DEL", pmPod{id: "c1"}, conf); err != nil {
				t.Errorf("DEL of the same config: %v", err)
			}
		})
	}
	t.Run("accepted for drop-in configs", func(t *testing.T) {
		conf := n.portmapConf("1.0.0", nil, prev, map[string]any{"markMasqBit": 13, "backend": "iptables", "conditionsV4": []string{}})
		out, err := n.call(portmap.Role, "ADD", pmPod{id: "c1", netns: "/x"}, conf)
		if err != nil || !pmJSONEqual(out, prev) {
			t.Errorf("ADD without mappings = %s, %v; want prevResult", out, err)
		}
	})
}

// TestPortmapReAdd: an ADD repeated for the same attachment with other
// mappings forwards only the new ones.
func TestPortmapReAdd(t *testing.T) {
	n := newPMNode(t)
	p := n.newPod("readd")
	old := []pmMap{{HostPort: 8680, ContainerPort: 80}, {HostPort: 8681, ContainerPort: 80}}
	prev := n.up(p, "1.0.0", old, nil)
	pmServeHTTP(t, p, 80)
	now := []pmMap{{HostPort: 8681, ContainerPort: 80}, {HostPort: 8682, ContainerPort: 80}}
	n.must(portmap.Role, "ADD", p, n.portmapConf("1.0.0", now, prev, nil))
	for port, want := range map[int]bool{8680: false, 8681: true, 8682: true} {
		body, err := pmGet(t, n.remote, pmNodeIP4, port)
		if got := err == nil && strings.HasPrefix(body, p.id); got != want {
			t.Errorf("GET :%d after the second ADD = %q, %v; want reachable %v", port, body, err, want)
		}
	}
	if r := n.records()[p.id]; len(r.Mappings) != 4 {
		t.Errorf("record after the second ADD: %+v; want 8681 and 8682 over IPv4 and IPv6", r.Mappings)
	}
	n.must(portmap.Role, "CHECK", p, n.portmapConf("1.0.0", now, prev, nil))
	n.down(p, "1.0.0", now, prev)
	if es := pmEntries(t); len(es) != 0 {
		t.Errorf("elements after DEL: %+v", es)
	}
}

// TestPortmapBusyStore: while another process holds the store past its
// timeout, ADD, CHECK, DEL and GC fail with code 11 (try again later).
func TestPortmapBusyStore(t *testing.T) {
	n := newPMNode(t)
	p := n.newPod("busy")
	maps := []pmMap{{HostPort: 8780, ContainerPort: 80}}
	prev := n.up(p, "1.1.0", maps, nil)
	st, err := store.Open(n.dir)
	pmMust(t, err)
	t.Setenv(store.EnvTimeout, "100ms")
	for _, cmd := range []string{"ADD", "CHECK", "DEL", "GC"} {
		_, err := n.call(portmap.Role, cmd, p, n.portmapConf("1.1.0", maps, prev, nil))
		if code := cniplug.CodeOf(err); code != types.ErrTryAgainLater || !errors.Is(err, store.ErrBusy) {
			t.Errorf("%s with the store held: code %d, err %v; want %d (busy)", cmd, code, err, types.ErrTryAgainLater)
		}
	}
	st.Close()
	n.down(p, "1.1.0", maps, prev)
}
