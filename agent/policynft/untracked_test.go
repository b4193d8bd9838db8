package policynft_test

import (
	"os"
	"testing"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	networkingv1 "k8s.io/api/networking/v1"

	"github.com/cnibox/cnibox/internal/policymodel"
)

// notrackAll puts, in l's node namespace, a table of the test's that
// exempts every packet from conntrack in prerouting (priority raw), as an
// operator's NOTRACK rule does for the traffic it names (NodeLocal
// DNSCache's for 169.254.20.10:53).
func notrackAll(t *testing.T, l *lab) {
	f, err := os.Open(l.nodePath)
	must(t, err)
	defer f.Close()
	c, err := nftables.New(nftables.WithNetNSFd(int(f.Fd())))
	must(t, err)
	tb := c.AddTable(&nftables.Table{Name: "test-notrack", Family: nftables.TableFamilyINet})
	accept := nftables.ChainPolicyAccept
	ch := c.AddChain(&nftables.Chain{Name: "pre", Table: tb, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityRaw, Policy: &accept})
	c.AddRule(&nftables.Rule{Table: tb, Chain: ch, Exprs: []expr.Any{&expr.Notrack{}}})
	must(t, c.Flush())
}

// TestPolicyUntracked: with every packet of the node untracked (a NOTRACK
// rule of someone else's), the table judges each packet as the first of a
// new connection, by its own addresses and ports: x/srv admits TCP 80
// from x/cli only, and y/other reaches it on no port, nor x/cli on 81
// (before, no rule matched a packet without conntrack and everything
// passed). A reply is judged as a connection of its own: x/cli's replies
// to x/srv's connection to it are connections to x/srv's own port, which
// its policy does not admit, so x/srv cannot connect out (NOTRACK makes a
// policy stateless). IPv4 and IPv6 (neighbour discovery, which conntrack
// never tracks, passes).
func TestPolicyUntracked(t *testing.T) {
	t.Parallel()
	l := newLab(t, "x/srv", "x/cli", "y/other")
	srv, cli, other := l.pod("x/srv"), l.pod("x/cli"), l.pod("y/other")
	n := newNode(t, l)
	n.e.SetNetworkPolicy(np("x", "srv-in", networkingv1.NetworkPolicySpec{PodSelector: *sel("app", "srv"), PolicyTypes: ingress,
		Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{PodSelector: sel("app", "cli")}},
			Ports: []networkingv1.NetworkPolicyPort{port(tcp, 80)}}}}))
	n.start()
	notrackAll(t, l)
	for _, v6 := range []bool{false, true} {
		for _, c := range []struct {
			from, to *labPod
			port     uint16
			want     bool
		}{{cli, srv, 80, true}, {cli, srv, 81, false}, {other, srv, 80, false}, {srv, cli, 80, false}, {cli, other, 80, true}} {
			to := c.to.ip
			if v6 {
				to = c.to.ip6
			}
			if got := connect(t, c.from, to, policymodel.TCP, c.port, waitFor(c.want)); got != c.want {
				t.Errorf("untracked %s/%s -> %s/%s %s TCP %d: connected %v, want %v", c.from.ns, c.from.name, c.to.ns, c.to.name, to, c.port, got, c.want)
			}
		}
	}
}
