package policynft_test

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"testing"
	"time"

	networkingv1 "k8s.io/api/networking/v1"

	"github.com/cnibox/cnibox/internal/policymodel"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nft"
	"github.com/cnibox/cnibox/netops/nstest"
)

// The escape suite with the Services table (issue 63; docs/security.md):
// x/victim is the one backend of the lab's Services (svcLab: ClusterIPs
// and NodePorts, TCP and UDP, both families), x/victim and y/atk are
// isolated both ways with no rule, and y/atk sends, on a packet socket of
// its own, packets a DNAT could carry past the policies: to a ClusterIP
// and to a NodePort, with TCP flags conntrack refuses (INVALID: no DNAT,
// routed on by the node's default route), untracked (an operator's
// NOTRACK rule: no DNAT either), to a ClusterIP port no Service has,
// fragments, from its IPv6 link-local address; and x/victim reaches its
// own Service (hairpin). The node has a default route (to the client off
// the cluster), so what the DNAT leaves alone meets the forward hook
// rather than an unreachable route. Each packet must end where its class
// says (a counter of the policy table, or the statistic of the node's
// stack that counts it), and none may reach x/victim nor leave the node
// by its default route.

// svcEscape is one packet class sent at a Service.
type svcEscape struct {
	name string
	// build makes the packet from the attacker a to the frontend to
	// (the node's MAC), its port port, tagged.
	build func(k kit, a, to end, port, tag uint16) sent
	// want is the policy counter (c-...) or the node's statistic that
	// counts it, by family (IPv4's, IPv6's); "": not of that family.
	want4, want6 string
	// noService6, when set, is want6 to a ClusterIP port no Service has
	// (no DNAT: routed by the node, not bridged to a pod).
	noService6 string
}

func svcTCP(flags byte) func(k kit, a, to end, port, tag uint16) sent {
	return func(k kit, a, to end, port, tag uint16) sent {
		return k.pkt(nstest.ProtoTCP, tcpT(port, flags), via{})(a, to, tag)
	}
}

// svcFrags is a TCP SYN with 8 bytes of data to port in two fragments,
// those of keep.
func svcFrags(keep ...int) func(k kit, a, to end, port, tag uint16) sent {
	return func(k kit, a, to end, port, tag uint16) sent {
		src, dst := a.addr(k.v6, false), to.addr(k.v6, false)
		t := tcpSeg(src, dst, tag, port, nstest.TCPSyn, []byte("fragment"))
		if k.v6 {
			return fragments6(a, to.mac, src, dst, nstest.ProtoTCP, tag, t, []int{24}, keep...)
		}
		return fragments4(a, to.mac, src, dst, nstest.ProtoTCP, tag, t, []int{24}, keep...)
	}
}

func svcEscapes() []svcEscape {
	both := func(name string, b func(k kit, a, to end, port, tag uint16) sent, want string) svcEscape {
		return svcEscape{name, b, want, want, ""}
	}
	return []svcEscape{
		both("TCP SYN (DNATed, then judged)", svcTCP(nstest.TCPSyn), "c-iso-eg"),
		both("TCP ACK without a connection (taken up, DNATed, judged)", svcTCP(nstest.TCPAck), "c-iso-eg"),
		both("UDP (DNATed, then judged)", func(k kit, a, to end, port, tag uint16) sent {
			return k.pkt(nstest.ProtoUDP, udpT(port), via{})(a, to, tag)
		}, "c-iso-eg"),
		both("TCP no flags (INVALID: not DNATed)", svcTCP(0), "c-invalid"),
		both("TCP SYN+FIN (INVALID)", svcTCP(nstest.TCPSyn|nstest.TCPFin), "c-invalid"),
		both("TCP FIN+PSH+URG (INVALID)", svcTCP(nstest.TCPFin|nstest.TCPPsh|nstest.TCPUrg), "c-invalid"),
		both("TCP SYN+ACK without a connection (INVALID)", svcTCP(nstest.TCPSyn|nstest.TCPAck), "c-invalid"),
		both("TCP RST (INVALID)", svcTCP(nstest.TCPRst), "c-invalid"),
		{"fragment: the first alone", svcFrags(0), "Ip.ReasmFails", "Ip6ReasmFails", ""},
		{"fragment: a later one alone", svcFrags(1), "Ip.ReasmFails", "Ip6ReasmFails", ""},
		both("fragments: both (reassembled, DNATed, judged)", svcFrags(0, 1), "c-iso-eg"),
		{"TCP SYN from the IPv6 link-local address", func(k kit, a, to end, port, tag uint16) sent {
			return k.pkt(nstest.ProtoTCP, tcpT(port, nstest.TCPSyn), via{fromLL: true})(a, to, tag)
			// DNATed to a pod of the bridge, br_netfilter bridges it and
			// the forward hook judges it; routed (no Service: no DNAT),
			// ip6_forward refuses a link-local source first.
		}, "", "c-linklocal", "Ip6InAddrErrors"},
	}
}

// svcFrame reports whether the Ethernet frame f carries a packet tagged
// tag (IPv4 identification and TCP/UDP source port; IPv6 flow label),
// whatever its addresses (a DNAT or a masquerade changes them).
func svcFrame(tag uint16) func([]byte) bool {
	return func(f []byte) bool {
		if len(f) < 14+40 {
			return false
		}
		h := f[14:]
		switch binary.BigEndian.Uint16(f[12:]) {
		case nstest.EtherIPv4:
			ihl := int(h[0]&0xf) * 4
			if binary.BigEndian.Uint16(h[4:]) != tag || len(h) < ihl+2 {
				return false
			}
			return (h[9] != nstest.ProtoTCP && h[9] != nstest.ProtoUDP) || binary.BigEndian.Uint16(h[ihl:]) == tag
		case nstest.EtherIPv6:
			return binary.BigEndian.Uint32(h)&0xfffff == uint32(tag)
		}
		return false
	}
}

// TestEscapeServices runs the classes at a ClusterIP and a NodePort of
// x/victim's Service, each family, and x/victim's hairpin.
func TestEscapeServices(t *testing.T) {
	t.Parallel()
	s := newSvcLab(t, "x/victim", "x/victim", "y/atk")
	victim, atk := s.pod("x/victim"), s.pod("y/atk")
	must(t, s.node.SetSysctls(netops.SysctlSetting{Key: "net.ipv4.ipfrag_time", Value: "1"},
		netops.SysctlSetting{Key: "net.netfilter.nf_conntrack_frag6_timeout", Value: "1"}))
	// What no DNAT takes leaves by the default route: to the client.
	must(t, s.node.EnsureRoute(netops.Route{GW: outClient4, Dev: "vout"}))
	must(t, s.node.EnsureRoute(netops.Route{GW: outClient6, Dev: "vout"}))
	for _, p := range []*networkingv1.NetworkPolicy{denyAll("x", "victim"), denyAll("y", "atk")} {
		s.n.e.SetNetworkPolicy(p)
	}
	s.n.start()
	s.n.attach(s.lab, victim, atk)
	h, err := nft.Open(s.nodePath)
	must(t, err)
	t.Cleanup(func() { h.Close() })
	br, err := s.node.LinkByName("br0")
	must(t, err)
	a := end{atk.ip, atk.ip6, netops.PodLinkLocal("veth1"), podMAC(t, atk)}
	atVictim := nstest.CaptureFrames(t, victim.path, "eth0")
	leftNode := nstest.CaptureFrames(t, s.outside.path, "eth0")
	tag := uint16(2000)
	// sent is every packet expect sent, by tag, with its subtest's name:
	// "nothing crossed" checks, once, that none reached x/victim or left
	// the node.
	var sent []struct {
		tag  uint16
		name string
	}

	// expect sends the frames of one packet and waits for want (a
	// counter or a statistic) to count it.
	expect := func(t *testing.T, frames [][]byte, want string) {
		t.Helper()
		counters, err := h.PolicyCounters()
		must(t, err)
		stats := nstest.NetStats(t, s.nodePath)
		must(t, nstest.SendFrames(t, atk.path, "eth0", frames...))
		sent = append(sent, struct {
			tag  uint16
			name string
		}{tag, t.Name()})
		count := func() bool {
			if want[:2] == "c-" {
				now, err := h.PolicyCounters()
				must(t, err)
				return now[want].Packets > counters[want].Packets
			}
			return nstest.NetStats(t, s.nodePath)[want] > stats[want]
		}
		for deadline := time.Now().Add(allowWait); !count(); {
			if time.Now().After(deadline) {
				now, _ := h.PolicyCounters()
				var stat []string
				for k, v := range nstest.NetStats(t, s.nodePath) {
					if v != stats[k] {
						stat = append(stat, fmt.Sprintf("%s +%d", k, v-stats[k]))
					}
				}
				t.Errorf("%s did not count it (counters moved: %s; statistics moved: %v; reached x/victim: %v; left the node: %v)", want, moved(counters, now),
					stat, atVictim.Seen(svcFrame(tag), 0), leftNode.Seen(svcFrame(tag), 0))
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
		// Counted, and not yet seen beyond: a copy that crossed later
		// is "nothing crossed"'s to find (it waits for an ARP request
		// of the attacker's that reaches x/victim, after the hairpin's
		// two refused connections), not a wait of every packet's.
		if atVictim.Seen(svcFrame(tag), 0) || leftNode.Seen(svcFrame(tag), 0) {
			t.Errorf("CROSSED: counted on %s, yet it reached x/victim (%v) or left the node (%v)", want,
				atVictim.Seen(svcFrame(tag), 0), leftNode.Seen(svcFrame(tag), 0))
		}
	}
	frontends := []struct {
		name string
		to   end
		port uint16
	}{
		{"ClusterIP", end{svcCIP4, svcCIP6, netip.Addr{}, br.MAC}, svcPort},
		{"NodePort", end{outNode4, outNode6, netip.Addr{}, br.MAC}, svcNodePort},
		{"ClusterIP port no Service has", end{svcCIP4, svcCIP6, netip.Addr{}, br.MAC}, 9999},
	}
	for _, fe := range frontends {
		for _, k := range []kit{{v6: false}, {v6: true}} {
			for _, c := range svcEscapes() {
				want := c.want4
				if k.v6 {
					want = c.want6
					if fe.port == 9999 && c.noService6 != "" {
						want = c.noService6
					}
				}
				if want == "" {
					continue
				}
				t.Run(fe.name+"/"+k.pick("IPv4", "IPv6")+"/"+c.name, func(t *testing.T) {
					tag++
					expect(t, c.build(k, a, fe.to, fe.port, tag).frames, want)
				})
			}
		}
	}
	t.Run("untracked", func(t *testing.T) {
		// An operator's NOTRACK rule (NodeLocal DNSCache's for the DNS
		// ClusterIP): no DNAT, the policy table judges each packet.
		notrackAll(t, s.lab)
		for _, fe := range frontends[:2] {
			for _, k := range []kit{{v6: false}, {v6: true}} {
				t.Run(fe.name+"/"+k.pick("IPv4", "IPv6"), func(t *testing.T) {
					tag++
					expect(t, svcTCP(nstest.TCPSyn)(k, a, fe.to, fe.port, tag).frames, "c-iso-eg")
				})
			}
		}
	})
	t.Run("hairpin: x/victim to its own Service", func(t *testing.T) {
		counters, err := h.PolicyCounters()
		must(t, err)
		for _, to := range []netip.Addr{svcCIP4, svcCIP6} {
			if connect(t, victim, to, policymodel.TCP, svcPort, denyWait) {
				t.Errorf("x/victim reached itself through %v under deny-all", to)
			}
		}
		now, err := h.PolicyCounters()
		must(t, err)
		if now["c-iso-eg"].Packets <= counters["c-iso-eg"].Packets {
			t.Errorf("the hairpin was not judged: counters moved %s", moved(counters, now))
		}
	})
	t.Run("nothing crossed", func(t *testing.T) {
		// The captures work: the attacker's own ARP request reaches x/victim.
		tag++
		arp := arpFrame(a, nil, 1, a.ip4, victim.ip, tag)
		must(t, nstest.SendFrames(t, atk.path, "eth0", arp.frames...))
		if !atVictim.Seen(arp.sig.frameMatches, allowWait) {
			t.Fatal("the attacker's own ARP request did not reach x/victim: the capture sees nothing")
		}
		for _, p := range sent {
			if atVictim.Seen(svcFrame(p.tag), 0) || leftNode.Seen(svcFrame(p.tag), 0) {
				t.Errorf("%s (packet %d): CROSSED: reached x/victim (%v) or left the node (%v)", p.name, p.tag,
					atVictim.Seen(svcFrame(p.tag), 0), leftNode.Seen(svcFrame(p.tag), 0))
			}
		}
	})
}
