// Package backendtest is what the backends' kernel tests share: two node
// namespaces joined by a veth (the underlay, 192.168.78.0/24), each node's
// backend environment, and its lease in a cluster network 10.244.0.0/16.
// Only tests import it.
package backendtest

import (
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"testing"

	"github.com/cnibox/cnibox/agent/backend"
	"github.com/cnibox/cnibox/agent/lease"
	"github.com/cnibox/cnibox/agent/netconf"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nstest"
)

// Node is one test node.
type Node struct {
	NS    string
	H     *netops.Handle
	Env   backend.Env
	Lease lease.Lease
}

// TwoNodes makes two node namespaces on one L2 link, node i at
// 192.168.78.i/24 (and fd00:78::i/64) on eth0, leasing 10.244.i.0/24 (and
// fd00:10:244:i::/64 when cfg has IPv6), with cfg parsed from netConf.
func TwoNodes(t *testing.T, netConf string) [2]*Node {
	t.Helper()
	nstest.RequireRoot(t)
	cfg, err := netconf.Parse([]byte(netConf))
	if err != nil {
		t.Fatal(err)
	}
	var out [2]*Node
	for i := range out {
		ns := nstest.NewNS(t, fmt.Sprintf("be-n%d", i+1))
		h, err := netops.Open(ns)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { h.Close() })
		out[i] = &Node{NS: ns, H: h}
	}
	if _, _, err := out[0].H.EnsureVeth(netops.VethOpts{HostName: "eth0", PeerName: "eth0", Peer: out[1].H}); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if testing.Verbose() {
		log = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	for i, n := range out {
		a4 := netip.PrefixFrom(netip.AddrFrom4([4]byte{192, 168, 78, byte(i + 1)}), 24)
		a6 := netip.MustParsePrefix(fmt.Sprintf("fd00:78::%d/64", i+1))
		if err := n.H.EnsureAddr("eth0", a4, netops.AddrOpts{NoDAD: true}); err != nil {
			t.Fatal(err)
		}
		if err := n.H.EnsureAddr("eth0", a6, netops.AddrOpts{NoDAD: true}); err != nil {
			t.Fatal(err)
		}
		if err := n.H.SetLinkUp("eth0"); err != nil {
			t.Fatal(err)
		}
		u := backend.Underlay{Iface: "eth0", MTU: 1500, Addr4: a4, Public4: a4.Addr()}
		l := lease.Lease{Subnet: netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 244, byte(i + 1), 0}), 24)}
		if cfg.EnableIPv6 {
			u.Addr6, u.Public6 = a6, a6.Addr()
			l.Subnet6 = netip.MustParsePrefix(fmt.Sprintf("fd00:10:244:%d::/64", i+1))
		}
		if !cfg.EnableIPv4 {
			u.Addr4, u.Public4, l.Subnet = netip.Prefix{}, netip.Addr{}, netip.Prefix{}
		}
		l.Attrs.PublicIP, l.Attrs.PublicIPv6 = u.Public4, u.Public6
		n.Env = backend.Env{Config: cfg, Under: u, Log: log.With("node", i+1)}
		n.Lease = l
	}
	return out
}

// Start prepares b on n, publishes into n's lease and sets it.
func (n *Node) Start(t *testing.T, b backend.Backend) {
	t.Helper()
	if err := b.Prepare(n.H); err != nil {
		nstest.SkipIfKernelLacks(t, b.Type()+" devices", err)
		t.Fatalf("Prepare: %v", err)
	}
	b.Publish(&n.Lease.Attrs)
	if err := b.SetLease(n.H, n.Lease); err != nil {
		t.Fatalf("SetLease: %v", err)
	}
}

// Reachable checks that from reaches to's address a (a listener in to's
// namespace).
func Reachable(t *testing.T, from, to *Node, a netip.Addr) error {
	t.Helper()
	return nstest.Reachable(t, from.NS, to.NS, a)
}

// Must fails t at once on err.
func Must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// HasRoute reports whether rs (as the kernel lists them) hold w.
func HasRoute(rs []netops.Route, w netops.Route) bool {
	for _, r := range rs {
		if backend.SameRoute(r, w) {
			return true
		}
	}
	return false
}
