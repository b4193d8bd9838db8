package policy

import (
	"math/rand/v2"
	"net/netip"
	"runtime"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	nv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	cnpv1 "sigs.k8s.io/network-policy-api/apis/v1beta1"
)

// shapes reads a policy's shape from fuzz bytes: each read past the end
// is 0. left is how many entries the shape may still have in all (peers,
// excepts, ports, networks), so that making it stays cheap.
type shapes struct {
	b    []byte
	rng  *rand.Rand
	left int
}

func (s *shapes) byte() byte {
	if len(s.b) == 0 {
		return 0
	}
	c := s.b[0]
	s.b = s.b[1:]
	return c
}

// count is small mostly, and up to 25,600 (past every cap; 20,000 in all)
// from the top bytes: a large shape costs the fuzzer a byte, not
// kilobytes.
func (s *shapes) count() int {
	c := int(s.byte())
	n := c % 6
	if c >= 240 {
		n = (c - 239) * 1600
	}
	n = min(n, s.left)
	s.left -= n
	return n
}

// prefix is a prefix of either family: its bits from the input, its
// address from the input or spread at random (seeded from the input).
func (s *shapes) prefix() netip.Prefix {
	c := s.byte()
	var b [16]byte
	for i := range b {
		if c&1 == 0 && i < 4 {
			b[i] = s.byte()
		} else {
			b[i] = byte(s.rng.Uint32())
		}
	}
	if c&2 == 0 {
		return netip.PrefixFrom(netip.AddrFrom4([4]byte(b[:4])), int(s.byte())%33).Masked()
	}
	return netip.PrefixFrom(netip.AddrFrom16(b), int(s.byte())%129).Masked()
}

func (s *shapes) peer() nv1.NetworkPolicyPeer {
	switch s.byte() % 5 {
	case 0, 1:
		b := &nv1.IPBlock{CIDR: s.prefix().String()}
		for range s.count() {
			b.Except = append(b.Except, s.prefix().String())
		}
		if s.byte()%16 == 0 {
			b.CIDR = "10.0.0.1/8" // not the network's address
		}
		return nv1.NetworkPolicyPeer{IPBlock: b}
	case 2:
		return nv1.NetworkPolicyPeer{PodSelector: sel("pod", string('a'+rune(s.byte()%3)))}
	case 3:
		return nv1.NetworkPolicyPeer{NamespaceSelector: sel("ns", string('x'+rune(s.byte()%3)))}
	}
	return nv1.NetworkPolicyPeer{}
}

func (s *shapes) port() nv1.NetworkPolicyPort {
	protos := []corev1.Protocol{"", corev1.ProtocolTCP, corev1.ProtocolUDP, corev1.ProtocolSCTP, "ICMP"}
	p := nv1.NetworkPolicyPort{}
	if proto := protos[s.byte()%5]; proto != "" {
		p.Protocol = &proto
	}
	first := int32(s.byte())<<8 | int32(s.byte())
	switch s.byte() % 4 {
	case 0:
		v := intstr.FromInt32(first)
		p.Port = &v
	case 1:
		v := intstr.FromInt32(first)
		end := first + int32(s.byte())
		p.Port, p.EndPort = &v, &end
	case 2:
		v := intstr.FromString([]string{"web", "serve-80-tcp", ""}[s.byte()%3])
		p.Port = &v
	}
	return p
}

func (s *shapes) networkPolicy() *nv1.NetworkPolicy {
	spec := nv1.NetworkPolicySpec{PodSelector: *sel("pod", "a")}
	for range s.count() {
		r := nv1.NetworkPolicyIngressRule{}
		for range s.count() {
			r.From = append(r.From, s.peer())
		}
		for range s.count() {
			r.Ports = append(r.Ports, s.port())
		}
		if s.byte()%2 == 0 {
			spec.Ingress = append(spec.Ingress, r)
		} else {
			spec.Egress = append(spec.Egress, nv1.NetworkPolicyEgressRule{To: r.From, Ports: r.Ports})
		}
	}
	return np("x", "fuzz", spec)
}

func (s *shapes) clusterNetworkPolicy() *cnpv1.ClusterNetworkPolicy {
	actions := []cnpv1.ClusterNetworkPolicyRuleAction{accept, deny, pass}
	var eg []cnpv1.ClusterNetworkPolicyEgressRule
	for range s.count() {
		r := cnpv1.ClusterNetworkPolicyEgressRule{Action: actions[s.byte()%3]}
		for range s.count() {
			p := cnpv1.ClusterNetworkPolicyEgressPeer{Namespaces: sel("ns", "y")}
			if s.byte()%2 == 0 {
				p = cnpv1.ClusterNetworkPolicyEgressPeer{}
				for range s.count() {
					p.Networks = append(p.Networks, cnpv1.CIDR(s.prefix().String()))
				}
			}
			r.To = append(r.To, p)
		}
		for range s.count() {
			r.Protocols = append(r.Protocols, tcpPort(int32(s.byte())+1))
		}
		eg = append(eg, r)
	}
	return cnp("fuzz", admin, 1, nil, eg)
}

// FuzzPolicyShapes: a NetworkPolicy or ClusterNetworkPolicy of any shape
// (ipBlocks with excepts, peers, ports, in any number) compiles within a
// budget per input, 64 MiB allocated and 10 s (the caps bound the work:
// the old cut of a few thousand excepts took minutes and gigabytes; the
// time is a bound on that, not a speed test: under make test's -race on 2
// loaded cores seed#4, 0.14 s without -race, took 1.7 s), and what comes
// out is within the caps: a policy with issues is FailClosed, a capped one
// holds its subject's set alone.
func FuzzPolicyShapes(f *testing.F) {
	for _, s := range []string{"", "\x01\x02\x00\x00\x0a\x00\x00\x00\x08\x02\x00\x02\x01\x00\x50\x00",
		"\x00\x01\xf0\x00\x02\x80\x01\xf5", "\x01\x01\x01\x02\x02\x00\x00\xff\x01\x00\x20\x03\x00\x00\x00\x00",
		"\x01\xff\xff\x02", "\x00\xf8\xf8\xf8", "\x01\x01\xfa\x00\x00\xf0\xf0"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		s := &shapes{b: b[min(len(b), 1):], rng: rand.New(rand.NewPCG(uint64(len(b)), 48)), left: 20000}
		var compile func() *compiled
		if len(b) > 0 && b[0]%2 == 1 {
			p := s.clusterNetworkPolicy()
			compile = func() *compiled { return compileCNP(p) }
		} else {
			p := s.networkPolicy()
			compile = func() *compiled { return compileNP(p) }
		}
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		start := time.Now()
		c := compile()
		took := time.Since(start)
		runtime.ReadMemStats(&after)
		if alloc := after.TotalAlloc - before.TotalAlloc; took > 10*time.Second || alloc > 64<<20 {
			t.Fatalf("compiled in %v with %d MiB allocated, over the budget of 10 s and 64 MiB", took, alloc>>20)
		}
		prefixes, clauses := 0, 0
		for _, d := range c.defs {
			prefixes += len(d.static)
		}
		for _, p := range c.dirs {
			if p == nil {
				continue
			}
			if p.FailClosed != (len(c.issues) > 0) {
				t.Fatalf("FailClosed %v with issues %v", p.FailClosed, c.issues)
			}
			for _, r := range p.Rules {
				clauses += len(r.Clauses)
			}
		}
		if prefixes > maxElems || clauses > maxClauses {
			t.Fatalf("%d prefixes and %d clauses, over the caps", prefixes, clauses)
		}
		for _, is := range c.issues {
			if strings.Contains(is.Reason, "(docs/policy.md, Caps)") && len(c.defs) != 1 {
				t.Fatalf("capped (%v) with %d sets, want its subject's alone", is, len(c.defs))
			}
		}
	})
}
