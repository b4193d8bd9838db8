package policynft_test

import (
	"errors"
	"fmt"
	"io"
	"net/netip"
	"syscall"
	"testing"
	"time"

	networkingv1 "k8s.io/api/networking/v1"

	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nft"
)

// TestPolicyPendingStaleConntrack: a connection of an address's earlier
// pod, allowed and cached at the table's generation, must not reach the
// next pod that gets the address while it is pending. Here x/a's veth
// goes without a DEL (the pod died; the agent has not heard), a new pod of
// x gets its address and MAC, and the ADD marks it pending: the old
// connection's next packet is dropped by the pending set (its counter
// counts it) and never reaches the new pod (which would answer with a
// reset). The entry chain checks the verdict cache before the pending set
// (netops/nft/policy_entry.go: gen-f, then pending, then gen), so it
// guards the ADD's emptying of gen-f in its batch (genFlushMsg): without
// it the new pod resets the old connection and c-pending counts nothing
// (docs/benchmarks.md, "The per-packet cuts"), in both families (fwd4's
// and fwd6's entry chains; each fails alone with the flush taken out).
func TestPolicyPendingStaleConntrack(t *testing.T) {
	t.Run("ipv4", func(t *testing.T) { testPolicyPendingStaleConntrack(t, false) })
	t.Run("ipv6", func(t *testing.T) { testPolicyPendingStaleConntrack(t, true) })
}

func testPolicyPendingStaleConntrack(t *testing.T, v6 bool) {
	l := newLab(t, "x/a", "y/a")
	xa, ya := l.pod("x/a"), l.pod("y/a")
	to, bits := xa.ip, 24
	if v6 {
		to, bits = xa.ip6, 64
	}
	n := newNode(t, l)
	n.e.SetNetworkPolicy(np("x", "from-y", networkingv1.NetworkPolicySpec{PolicyTypes: ingress,
		Ingress: []networkingv1.NetworkPolicyIngressRule{{
			From: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: sel("ns", "y")}},
		}}}))
	n.start()
	c := dialEchoAt(t, ya, xa, to)
	for i := range 5 {
		if !c.echo(fmt.Sprint(i), allowWait) {
			t.Fatalf("echo %d: the allowed connection does not carry data", i)
		}
	}
	h, err := nft.Open(l.nodePath)
	must(t, err)
	defer h.Close()

	// x/a's veth goes; a new pod of x takes its address and MAC (so that
	// y/a's neighbour entry sends it there), and its ADD marks it pending.
	old, err := netops.Open(xa.path)
	must(t, err)
	eth0, err := old.LinkByName("eth0")
	old.Close()
	must(t, err)
	must(t, l.node.DeleteLink("veth0"))
	nh, _ := openNS(t, "pp")
	br, err := l.node.LinkByName("br0")
	must(t, err)
	_, _, err = l.node.EnsureVeth(netops.VethOpts{HostName: "vethnew", PeerName: "eth0", Peer: nh, MasterIndex: br.Index, PeerMAC: eth0.MAC})
	must(t, err)
	if marked, err := h.MarkPolicyPending("x", []netip.Addr{xa.ip, xa.ip6}); err != nil || !marked {
		t.Fatalf("MarkPolicyPending(x) = %v, %v; want marked", marked, err)
	}
	must(t, nh.EnsureAddr("eth0", netip.PrefixFrom(to, bits), netops.AddrOpts{NoDAD: true}))

	pending := func() uint64 {
		cs, err := h.PolicyCounters()
		must(t, err)
		return cs["c-pending"].Packets
	}
	p0 := pending()
	// The old connection's next data: dropped, it times out; delivered,
	// the new pod, which has no such connection, resets it.
	c.c.SetDeadline(time.Now().Add(denyWait))
	_, err = c.c.Write([]byte("old"))
	if err == nil {
		_, err = io.ReadFull(c.c, make([]byte, 3))
	}
	switch {
	case err == nil:
		t.Error("the old connection carries data to the new pod at its address")
	case errors.Is(err, syscall.ECONNRESET):
		t.Errorf("the old connection reached the new pod, pending at its address (reset: %v)", err)
	}
	if got := pending() - p0; got == 0 {
		t.Error("the pending set's drop counted none of the old connection's packets: the verdict cache let them through")
	}
}
