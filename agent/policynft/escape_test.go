package policynft_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	networkingv1 "k8s.io/api/networking/v1"

	"github.com/cnibox/cnibox/internal/policymodel"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nft"
	"github.com/cnibox/cnibox/netops/nstest"
)

// The escape suite (issue 60, item 9; docs/policy.md, "Escape suite"):
// NetworkPolicies isolate x/victim and y/atk for ingress and egress, with
// no rule, on the policy table of the real engine and Sink; y/atk sends,
// on a packet socket of its own (every header its own), each class of
// escapeClasses to x/victim (from the same bridge, or from another node)
// and to the node. No packet the policies deny reaches the target, and
// each is dropped where the class says: by a
// counted drop of the policy table (the trace names the rule's table and
// chain), by the source address check, or by the node's stack (its IP
// statistics). The few the kernel must deliver whatever the policies
// (ARP, neighbour discovery) are delivered.

// TestEscape runs every class in each setting, each in a lab of its own:
// a pod target with the attacker's port checked (the bridge role's
// default) and unchecked ("ipspoofchk": false: the policy table alone),
// the node as the target from a checked port, and the attacker on
// another node, across the overlay (escape_overlay_test.go).
func TestEscape(t *testing.T) {
	t.Parallel()
	for _, cfg := range []escapeConfig{{checked: true}, {checked: false}, {checked: true, node: true}, {overlay: true}} {
		t.Run(cfg.String(), func(t *testing.T) {
			t.Parallel()
			e := newEscapeLab(t, cfg, denyAll("x", "victim"), denyAll("y", "atk"))
			for _, c := range escapeClasses() {
				t.Run(c.name, func(t *testing.T) { e.try(t, c) })
			}
			t.Run("nothing else crossed", e.nothingElse)
		})
	}
}

// escapeLab is the lab of one setting of the suite.
type escapeLab struct {
	cfg         escapeConfig
	l           *lab
	nft         *nft.Handle
	victim, atk *labPod
	a, to       end
	trace       *nstest.NFTrace // what comes in on the attacker's port
	// frames is what reaches the target's link: the victim's eth0, or
	// the node's bridge (ARP; the node's IP stack is raw's).
	frames *nstest.FrameCapture
	raw    map[int]*nstest.RawListener // the node's stack, by rawKey
	tag    uint16
	sent   []sentClass
	model  *policymodel.Model // the policies' model, as the engine made it
	// port is where the attacker's packets come in on the node, dev
	// the attacker's device they leave by (in atk.path).
	port, dev string
}

// sentClass is a packet the suite sent, and whether it had to reach the
// target.
type sentClass struct {
	class     string
	s         sent
	delivered bool
}

// The protocols the node's raw listeners take, by family.
var rawProtos = map[bool][]int{
	false: {nstest.ProtoICMP, nstest.ProtoTCP, nstest.ProtoUDP, 47, 132, 253, 254},
	true:  {nstest.ProtoICMPv6, nstest.ProtoTCP, nstest.ProtoUDP, 47, 59, 132, 253, 254},
}

func rawKey(proto int, v6 bool) int {
	if v6 {
		return proto | 1<<8
	}
	return proto
}

// denyAll isolates the pods app=<app> of namespace ns for ingress and
// egress, with no rule.
func denyAll(ns, app string) *networkingv1.NetworkPolicy {
	both := []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress}
	return np(ns, app+"-deny", networkingv1.NetworkPolicySpec{PodSelector: *sel("app", app), PolicyTypes: both})
}

// newEscapeLab makes the lab of setting cfg under the NetworkPolicies
// nps: x/victim and y/atk (app=victim, app=atk; namespaces labelled
// ns=x, ns=y), the node's pods attached to the table.
func newEscapeLab(t testing.TB, cfg escapeConfig, nps ...*networkingv1.NetworkPolicy) *escapeLab {
	pods := []string{"x/victim", "y/atk"}
	if cfg.overlay {
		pods = pods[:1] // y/atk is on the other node
	}
	l := newLab(t, pods...)
	e := &escapeLab{cfg: cfg, l: l, victim: l.pod("x/victim"), tag: 1000, port: "veth1", dev: "eth0"}
	// Fragments wait a second for the rest, not 30 or 60.
	must(t, l.node.SetSysctls(netops.SysctlSetting{Key: "net.ipv4.ipfrag_time", Value: "1"},
		netops.SysctlSetting{Key: "net.netfilter.nf_conntrack_frag6_timeout", Value: "1"}))
	n := newNode(t, l)
	local := []*labPod{e.victim}
	if cfg.overlay {
		e.overlay(t, n)
	} else {
		e.atk = l.pod("y/atk")
		local = append(local, e.atk)
	}
	for _, p := range nps {
		n.e.SetNetworkPolicy(p)
	}
	n.start()
	e.model = n.e.Model()
	n.attach(l, local...)
	var err error
	e.nft, err = nft.Open(l.nodePath)
	must(t, err)
	t.Cleanup(func() { e.nft.Close() })
	if cfg.checked {
		for port, p := range map[string]*labPod{"veth0": e.victim, "veth1": e.atk} {
			must(t, e.nft.EnsureSourceCheck(nft.SrcCheckBridge, port, []netip.Addr{p.ip, p.ip6}))
		}
	}
	if !cfg.overlay {
		e.a = end{e.atk.ip, e.atk.ip6, netops.PodLinkLocal("veth1"), podMAC(t, e.atk)}
	}
	switch {
	case cfg.node:
		br, err := l.node.LinkByName("br0")
		must(t, err)
		e.to = end{nodeAddr, nodeAddr6, linkLocalOf(t, l.node, "br0"), br.MAC}
		e.frames = nstest.CaptureFrames(t, l.nodePath, "br0")
		e.raw = map[int]*nstest.RawListener{}
		for v6, ps := range rawProtos {
			for _, p := range ps {
				e.raw[rawKey(p, v6)] = nstest.ListenRaw(t, l.nodePath, p, v6)
			}
		}
	case cfg.overlay:
		e.to.ip4, e.to.ip6, e.to.ll6 = e.victim.ip, e.victim.ip6, netops.PodLinkLocal("veth0")
		e.frames = nstest.CaptureFrames(t, e.victim.path, "eth0")
	default:
		e.to = end{e.victim.ip, e.victim.ip6, netops.PodLinkLocal("veth0"), podMAC(t, e.victim)}
		e.frames = nstest.CaptureFrames(t, e.victim.path, "eth0")
	}
	e.trace = nstest.TraceNFT(t, l.nodePath, func() error { return markTraced(l.nodePath, []string{e.port}) })
	return e
}

// podMAC is the MAC of p's eth0.
func podMAC(t testing.TB, p *labPod) net.HardwareAddr {
	h, err := netops.Open(p.path)
	must(t, err)
	defer h.Close()
	l, err := h.LinkByName("eth0")
	must(t, err)
	return l.MAC
}

// linkLocalOf is the IPv6 link-local address of dev.
func linkLocalOf(t testing.TB, h *netops.Handle, dev string) netip.Addr {
	addrs, err := h.AllAddrs(dev)
	must(t, err)
	for _, p := range addrs {
		if p.Addr().IsLinkLocalUnicast() {
			return p.Addr()
		}
	}
	t.Fatalf("%s has no link-local address: %v", dev, addrs)
	return netip.Addr{}
}

// received waits up to wait for s to reach the target, and reports
// whether it has: the victim's link, or the node's stack (its link for
// ARP).
func (e *escapeLab) received(s sent, wait time.Duration) bool {
	if !e.cfg.node || s.transport == nil {
		return e.frames.Seen(s.sig.frameMatches, wait)
	}
	n := min(8, len(s.transport))
	return e.raw[rawKey(s.proto, s.sig.src.Is6())].Seen(func(p nstest.RawPacket) bool {
		return p.Src == s.sig.src.WithZone("") && len(p.Data) >= n && bytes.Equal(p.Data[:n], s.transport[:n])
	}, wait)
}

// try sends one packet of class c and checks what becomes of it.
func (e *escapeLab) try(t *testing.T, c escapeClass) {
	want := c.want(e.cfg)
	if want.kind == notApplicable {
		t.Skip(want.why)
	}
	if e.cfg.overlay && want == isoEg {
		// Isolation sets hold the node's own pods: the attacker's
		// egress is its node's to judge; the victim's ingress is this
		// node's.
		want = isoIn
	}
	e.tag++
	e.expect(t, c.name, c.build(e.a, e.to, e.tag), want)
}

// expect sends s (of class name) and checks that want becomes of it.
func (e *escapeLab) expect(t testing.TB, name string, s sent, want outcome) {
	t.Helper()
	e.sent = append(e.sent, sentClass{class: name, s: s, delivered: want.kind == delivered})
	counters, err := e.nft.PolicyCounters()
	must(t, err)
	stats := nstest.NetStats(t, e.l.nodePath)
	must(t, nstest.SendFrames(t, e.atk.path, e.dev, s.frames...))
	switch want.kind {
	case unrouted:
		t.Logf("%s (nothingElse checks it did not reach the node)", want)
		return
	case delivered:
		if !e.received(s, allowWait) {
			t.Errorf("not delivered; want %s; %s", want, e.fate(t, s, counters, stats))
		}
		return
	case dropCounted, dropChecked:
		ev, ok := e.dropOrCross(s)
		if !ok {
			what := "no drop"
			if e.received(s, 0) {
				what = "CROSSED: reached the target"
			}
			t.Errorf("%s; want %s; %s", what, want, e.fate(t, s, counters, stats))
			return
		}
		now, err := e.nft.PolicyCounters()
		must(t, err)
		switch {
		case want.kind == dropChecked && (ev.Table != nft.SrcCheckTable || ev.Chain != want.name),
			want.kind == dropCounted && (ev.Table != nft.PolicyTable || now[want.name].Packets <= counters[want.name].Packets):
			t.Errorf("dropped by %s (counters moved: %s); want %s", ev, moved(counters, now), want)
		default:
			t.Logf("%s (%s)", want, ev)
		}
	default:
		deadline := time.Now().Add(allowWait)
		for nstest.NetStats(t, e.l.nodePath)[want.name] <= stats[want.name] {
			if time.Now().After(deadline) {
				t.Errorf("%s did not count it; want %s; %s", want.name, want, e.fate(t, s, counters, stats))
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Logf("%s", want)
	}
	if e.received(s, 0) {
		t.Errorf("CROSSED: reached the target (want %s)", want)
	}
}

// dropOrCross waits up to allowWait for the trace to report a drop of s,
// or for s to reach the target, whichever comes first, and returns the
// drop (ok false: none came).
func (e *escapeLab) dropOrCross(s sent) (ev nstest.TraceEvent, ok bool) {
	deadline := time.Now().Add(allowWait)
	for time.Now().Before(deadline) && !e.received(s, 0) {
		if ev, ok := e.trace.Drop(s.sig.matches, 10*time.Millisecond); ok {
			return ev, true
		}
	}
	return ev, false
}

// fate says what is known of s: whether it reached the target, the drops
// the trace reports of it, the counters and statistics that moved since
// counters and stats.
func (e *escapeLab) fate(t testing.TB, s sent, counters map[string]nft.PolicyCounter, stats map[string]uint64) string {
	var b bytes.Buffer
	fmt.Fprintf(&b, "reached the target: %v;", e.received(s, denyWait))
	for _, ev := range e.trace.Events() {
		if ev.Header != nil && s.sig.matches(ev.Header) {
			fmt.Fprintf(&b, " trace: %s type %d;", ev, ev.Type)
		}
	}
	now, err := e.nft.PolicyCounters()
	must(t, err)
	fmt.Fprintf(&b, " counters moved: %s; statistics moved:", moved(counters, now))
	for k, v := range nstest.NetStats(t, e.l.nodePath) {
		if v != stats[k] && (strings.Contains(k, "Err") || strings.Contains(k, "Reasm") || strings.Contains(k, "Trunc")) {
			fmt.Fprintf(&b, " %s +%d", k, v-stats[k])
		}
	}
	return b.String()
}

// moved names the counters of now that count more than in before.
func moved(before, now map[string]nft.PolicyCounter) string {
	var b bytes.Buffer
	for k, c := range now {
		if c.Packets > before[k].Packets {
			fmt.Fprintf(&b, "%s +%d ", k, c.Packets-before[k].Packets)
		}
	}
	return b.String()
}

// nothingElse: after an ARP request of the attacker's own, which the
// target gets, no packet of a class that must be dropped has reached it,
// nor anything else of the attacker's but discovery.
func (e *escapeLab) nothingElse(t *testing.T) {
	var last sent
	if !e.cfg.overlay { // ARP does not cross the overlay: each class's end was seen
		e.tag++
		last = arpFrame(e.a, nil, 1, e.a.ip4, e.to.ip4, e.tag)
		must(t, nstest.SendFrames(t, e.atk.path, e.dev, last.frames...))
		if !e.received(last, allowWait) {
			t.Fatal("the attacker's own ARP request did not reach the target")
		}
	}
	for _, sc := range e.sent {
		if !sc.delivered && e.received(sc.s, 0) {
			t.Errorf("%s: CROSSED", sc.class)
		}
	}
	if e.cfg.node {
		return
	}
	for _, f := range e.frames.Frames() {
		if !e.fromAttacker(f) || e.discovery(f) {
			continue
		}
		known := last.sig.frameMatches(f)
		for _, sc := range e.sent {
			known = known || sc.s.sig.frameMatches(f)
		}
		if !known {
			t.Errorf("a frame of the attacker's no class sent reached the target: % x", f)
		}
	}
}

// fromAttacker reports whether the frame f is the attacker's: from its
// MAC (bridged), or across the overlay (routed: the node's MAC) from its
// addresses or a foreign one.
func (e *escapeLab) fromAttacker(f []byte) bool {
	if len(f) < 14 || bytes.Equal(f[6:12], e.a.mac) {
		return len(f) >= 14
	}
	if !e.cfg.overlay {
		return false
	}
	var src netip.Addr
	switch binary.BigEndian.Uint16(f[12:]) {
	case nstest.EtherIPv4:
		if len(f) >= 34 {
			src = netip.AddrFrom4([4]byte(f[26:30]))
		}
	case nstest.EtherIPv6:
		if len(f) >= 54 {
			src = netip.AddrFrom16([16]byte(f[22:38]))
		}
	}
	return src.IsValid() && (src == e.a.ip4 || src == e.a.ip6 || src == foreign4 || src == foreign6)
}

// discovery reports whether the frame f is the attacker's own stack's
// neighbour or multicast listener discovery: ARP from its own address,
// or ICMPv6 130-136 and 143 from its own, its link-local or the
// unspecified address.
func (e *escapeLab) discovery(f []byte) bool {
	if len(f) < 14 {
		return false
	}
	switch binary.BigEndian.Uint16(f[12:]) {
	case nstest.EtherARP:
		return len(f) >= 42 && (netip.AddrFrom4([4]byte(f[28:32])) == e.a.ip4 || netip.AddrFrom4([4]byte(f[28:32])).IsUnspecified())
	case nstest.EtherIPv6:
		next, at := f[14+6], 14+40
		if next == nstest.ExtHopByHop && len(f) > at+1 { // MLD's router alert
			next, at = f[at], at+8*(int(f[at+1])+1)
		}
		if len(f) <= at || next != nstest.ProtoICMPv6 {
			return false
		}
		src := netip.AddrFrom16([16]byte(f[22:38]))
		typ := f[at]
		return (src == e.a.ip6 || src == e.a.ll6 || src.IsUnspecified()) && (typ >= 130 && typ <= 136 || typ == 143)
	}
	return false
}
