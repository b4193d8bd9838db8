package policynft_test

import (
	"fmt"
	"io"
	"net"
	"net/netip"
	"testing"
	"time"

	networkingv1 "k8s.io/api/networking/v1"

	"github.com/cnibox/cnibox/netops/nft"
	"github.com/cnibox/cnibox/netops/nstest"
)

// BenchmarkPolicyCachedRR: one-byte request/response over one allowed,
// established TCP connection between two pods of one bridge (br_netfilter
// on), with a policy isolating the server: every packet after the first
// meets the policy table's forward chain and is accepted by the verdict
// cache. What it measures is the per-packet cost of the entry chain (and
// of everything else on the path, which does not change): compare test
// binaries of two versions, run in turn on the same machine. With
// srccheck, both pods' ports have the source address check (bridge
// prerouting) too.
func BenchmarkPolicyCachedRR(b *testing.B) {
	b.Run("policy", func(b *testing.B) { benchCachedRR(b, false) })
	b.Run("policy+srccheck", func(b *testing.B) { benchCachedRR(b, true) })
}

func benchCachedRR(b *testing.B, srcCheck bool) {
	l := newLab(b, "x/a", "y/a")
	xa, ya := l.pod("x/a"), l.pod("y/a")
	n := newNode(b, l)
	n.e.SetNetworkPolicy(np("x", "from-y", networkingv1.NetworkPolicySpec{PolicyTypes: ingress,
		Ingress: []networkingv1.NetworkPolicyIngressRule{{
			From: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: sel("ns", "y")}},
		}}}))
	n.start()
	if srcCheck {
		for i, p := range []*labPod{xa, ya} {
			must(b, l.node.NFT().EnsureSourceCheck(nft.SrcCheckBridge, fmt.Sprintf("veth%d", i), []netip.Addr{p.ip, p.ip6}))
		}
	}
	nstest.ServeEcho(b, xa.path, netip.AddrPortFrom(xa.ip, 82), false)
	var c net.Conn
	must(b, nstest.Run(b, ya.path, func() error {
		var err error
		c, err = net.DialTimeout("tcp", fmt.Sprintf("%s:82", xa.ip), 5*time.Second)
		return err
	}))
	defer c.Close()
	buf := []byte{0}
	rr := func() {
		if _, err := c.Write(buf); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(c, buf); err != nil {
			b.Fatal(err)
		}
	}
	for range 100 { // past the first packets: cached
		rr()
	}
	b.ResetTimer()
	for range b.N {
		rr()
	}
}
