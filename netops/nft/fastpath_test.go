package nft_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"

	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/internal/labtest"
	"github.com/cnibox/cnibox/netops/nft"
	"github.com/cnibox/cnibox/netops/nstest"
)

// fastLab is labtest's bridge with two pods, an "outside" namespace routed
// from the host through veth vout (192.168.97.0/24), an echo server there
// on TCP 82, and br_netfilter on in the host (as on a node: bridged
// traffic meets the forward hook).
type fastLab struct {
	*labtest.Lab
	outside *netops.Handle
	out4    netip.Addr
}

func newFastLab(t *testing.T) *fastLab {
	l := &fastLab{Lab: labtest.New(t, 2), outside: openNS(t, "fo"), out4: netip.MustParseAddr("192.168.97.2")}
	_, _, err := l.Host.EnsureVeth(netops.VethOpts{HostName: "vout", PeerName: "eth0", Peer: l.outside})
	must(t, err)
	must(t, l.Host.EnsureAddr("vout", netip.MustParsePrefix("192.168.97.1/24"), netops.AddrOpts{}))
	must(t, l.outside.EnsureAddr("eth0", netip.PrefixFrom(l.out4, 24), netops.AddrOpts{}))
	must(t, l.outside.EnsureRoute(netops.Route{Dst: netip.MustParsePrefix("10.99.0.0/24"), GW: netip.MustParseAddr("192.168.97.1"), Dev: "eth0"}))
	must(t, l.Host.SetSysctls(netops.SysctlSetting{Key: "net.ipv4.ip_forward", Value: "1"}))
	if err := l.Host.SetSysctls(netops.SysctlSetting{Key: "net.bridge.bridge-nf-call-iptables", Value: "1"}); err != nil {
		t.Skipf("no br_netfilter: bridged traffic never meets the forward hook (%v)", err)
	}
	nstest.ServeEcho(t, l.outside.Path(), netip.AddrPortFrom(l.out4, 82), false)
	nstest.ServeEcho(t, l.Pods[1].Path(), netip.MustParseAddrPort("10.99.0.3:82"), false)
	return l
}

// echoer is an open connection to an echo server.
type echoer struct{ c net.Conn }

func dialEchoer(t *testing.T, from string, to netip.AddrPort) *echoer {
	e := &echoer{}
	must(t, nstest.Run(t, from, func() error {
		var err error
		e.c, err = net.DialTimeout("tcp", to.String(), 5*time.Second)
		return err
	}))
	t.Cleanup(func() { e.c.Close() })
	return e
}

// offloaded carries 100 round trips on e, then 100 more, and fails the
// test unless the forward hook (w) saw some of the first packets and none
// of the last 200: the connection went into the fast path.
func offloaded(t *testing.T, w *forwardWatch, e *echoer) {
	t.Helper()
	if !e.echo(100, 5*time.Second) {
		t.Fatal("the connection does not carry data")
	}
	before := w.seen()
	if before == 0 {
		t.Fatal("the slow path's counter saw no packet of the connection (its first ones take it): it counts nothing")
	}
	if !e.echo(100, 5*time.Second) {
		t.Fatal("the connection stopped carrying data once offloaded")
	}
	if got := w.seen() - before; got != 0 {
		t.Errorf("the forward hook saw %d packets of 200 of a connection past the threshold: not offloaded", got)
	}
}

// echo sends n round trips and reports whether all came back within wait
// each.
func (e *echoer) echo(n int, wait time.Duration) bool {
	buf := make([]byte, 8)
	for i := range n {
		msg := fmt.Sprintf("%08d", i)
		e.c.SetDeadline(time.Now().Add(wait))
		if _, err := e.c.Write([]byte(msg)); err != nil {
			return false
		}
		if _, err := io.ReadFull(e.c, buf); err != nil || string(buf) != msg {
			return false
		}
	}
	return true
}

// forwardWatch is a table of the test's in the host: a forward chain at
// priority 20 (after the fast path's) that counts the packets of
// connections to port 82 (or 8082, a host port mapped to 82) it sees,
// and one at priority 0 that drops them while
// blocked: what a policy change does.
type forwardWatch struct {
	t *testing.T
	c *nftables.Conn
}

var watchTable = &nftables.Table{Name: "fp-watch", Family: nftables.TableFamilyINet}

func newForwardWatch(t *testing.T, h *netops.Handle) *forwardWatch {
	f, err := openNSFile(h.Path())
	must(t, err)
	t.Cleanup(func() { f.Close() })
	c, err := nftables.New(nftables.WithNetNSFd(int(f.Fd())))
	must(t, err)
	w := &forwardWatch{t: t, c: c}
	c.AddTable(watchTable)
	accept := nftables.ChainPolicyAccept
	for _, ch := range []struct {
		name string
		prio int32
	}{{"count", 20}, {"block", 0}} {
		c.AddChain(&nftables.Chain{Name: ch.name, Table: watchTable, Type: nftables.ChainTypeFilter,
			Hooknum: nftables.ChainHookForward, Priority: nftables.ChainPriorityRef(nftables.ChainPriority(ch.prio)), Policy: &accept})
	}
	// the packets of connections to port 82, both ways (ct original
	// proto-dst), in a named counter (google/nftables cannot list a ct
	// expression with a direction back)
	c.AddObj(&nftables.CounterObj{Table: watchTable, Name: "c82"})
	for _, port := range []uint16{82, 8082} {
		dport := binary.BigEndian.AppendUint16(nil, port)
		c.AddRule(&nftables.Rule{Table: watchTable, Chain: &nftables.Chain{Name: "count", Table: watchTable}, Exprs: []expr.Any{
			&expr.Ct{Key: expr.CtKeyPROTODST, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: dport},
			&expr.Objref{Type: 1, Name: "c82"}}}) // NFT_OBJECT_COUNTER
	}
	must(t, c.Flush())
	return w
}

// seen is how many packets the counting chain saw.
func (w *forwardWatch) seen() uint64 {
	objs, err := w.c.GetObjects(watchTable)
	must(w.t, err)
	for _, o := range objs {
		if c, ok := o.(*nftables.CounterObj); ok && c.Name == "c82" {
			return c.Packets
		}
	}
	w.t.Fatal("no counter in the watch table")
	return 0
}

// block drops (on) or lets through (off) every forwarded packet, at
// priority 0, as a policy would.
func (w *forwardWatch) block(on bool) {
	ch := &nftables.Chain{Name: "block", Table: watchTable}
	w.c.FlushChain(ch)
	if on {
		w.c.AddRule(&nftables.Rule{Table: watchTable, Chain: ch, Exprs: []expr.Any{&expr.Verdict{Kind: expr.VerdictDrop}}})
	}
	must(w.t, w.c.Flush())
}

// TestFastPath: a routed connection (a pod on the bridge to a host behind
// another device of the node) is offloaded after DefaultFastPathAfter
// packets: its later packets never reach the forward hook, so a rule
// added there does not see them, until ResetFastPath (what every policy
// transaction queues) takes it out of the fast path: then that rule
// decides its next packet, and cuts it. A bridged connection (two pods of
// one bridge) is never offloaded. EnsureFastPath is idempotent, replaces
// the table when the devices change, and an empty spec deletes it.
func TestFastPath(t *testing.T) {
	t.Parallel()
	l := newFastLab(t)
	n := l.Host.NFT()
	changed, err := n.EnsureFastPath(nft.FastPathSpec{Devices: []string{"vout", "br0"}})
	nstest.SkipIfKernelLacks(t, "nftables flowtables", err)
	must(t, err)
	if !changed {
		t.Error("EnsureFastPath on a namespace without the table reported no change")
	}
	if changed, err := n.EnsureFastPath(nft.FastPathSpec{Devices: []string{"br0", "vout"}}); err != nil || changed {
		t.Errorf("EnsureFastPath again: changed %v, %v; want no change", changed, err)
	}
	devs, rules, err := n.FastPath()
	must(t, err)
	if !slices.Equal(devs, []string{"br0", "vout"}) || len(rules) != 3 {
		t.Errorf("FastPath() = %v, %q; want [br0 vout] and three rules", devs, rules)
	}
	w := newForwardWatch(t, l.Host)
	nstest.WaitLinksUp(t, l.Host.Path())

	routed := dialEchoer(t, l.Pods[0].Path(), netip.AddrPortFrom(l.out4, 82))
	offloaded(t, w, routed)
	w.block(true)
	if !routed.echo(5, 5*time.Second) {
		t.Error("an offloaded connection did not carry data: the drop rule saw it (not offloaded)")
	}
	must(t, n.ResetFastPath())
	if routed.echo(1, 1500*time.Millisecond) {
		t.Error("after ResetFastPath the connection still carries data past the drop rule")
	}
	w.block(false)
	routed.c.SetDeadline(time.Now().Add(15 * time.Second))
	buf := make([]byte, 8)
	if _, err := io.ReadFull(routed.c, buf); err != nil {
		t.Errorf("after the drop rule is gone, the resent data is not echoed: %v", err)
	}

	bridged := dialEchoer(t, l.Pods[0].Path(), netip.MustParseAddrPort("10.99.0.3:82"))
	before := w.seen()
	if !bridged.echo(100, 5*time.Second) {
		t.Fatal("the bridged connection does not carry data")
	}
	if got := w.seen() - before; got < 200 {
		t.Errorf("the forward hook saw %d packets of 200 of a bridged connection: offloaded", got)
	}

	if changed, err := n.EnsureFastPath(nft.FastPathSpec{Devices: []string{"br0"}, After: 5}); err != nil || !changed {
		t.Errorf("EnsureFastPath with other devices: changed %v, %v; want a change", changed, err)
	}
	if devs, _, _ := n.FastPath(); !slices.Equal(devs, []string{"br0"}) {
		t.Errorf("FastPath() devices = %v, want [br0]", devs)
	}
	if _, err := n.EnsureFastPath(nft.FastPathSpec{Devices: []string{"nosuchdev"}}); err == nil || errors.Is(err, nft.ErrNoFlowtable) {
		t.Errorf("EnsureFastPath with a missing device: %v, want an error that is not ErrNoFlowtable", err)
	}
	if changed, err := n.EnsureFastPath(nft.FastPathSpec{}); err != nil || !changed {
		t.Errorf("EnsureFastPath with no devices: changed %v, %v; want the table deleted", changed, err)
	}
	if devs, rules, err := n.FastPath(); err != nil || devs != nil || rules != nil {
		t.Errorf("FastPath() after the delete = %v, %v, %v; want nothing", devs, rules, err)
	}
	must(t, n.DeleteFastPath())
	must(t, n.ResetFastPath())
}

// BenchmarkFastPath: the routed path of TestFastPath (a pod on the bridge
// to a host behind another device of the node), with the fast path
// (offloaded after DefaultFastPathAfter packets) and without: one-byte
// round trips on one connection (rr), and a stream to a server that
// discards it (stream, bytes a second). make bench-fastpath runs it on
// Debian's kernel in make test-kernel's VM (this machine's kernel has no
// flowtables); docs/benchmarks.md.
func BenchmarkFastPath(b *testing.B) {
	for _, fast := range []bool{false, true} {
		name := "slow"
		if fast {
			name = "fast"
		}
		b.Run(name+"/rr", func(b *testing.B) {
			c := benchFastLab(b, fast, 82)
			buf := []byte{1}
			b.ResetTimer()
			for range b.N {
				if _, err := c.Write(buf); err != nil {
					b.Fatal(err)
				}
				if _, err := io.ReadFull(c, buf); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(name+"/stream", func(b *testing.B) {
			c := benchFastLab(b, fast, 83)
			chunk := make([]byte, 1<<20)
			b.SetBytes(int64(len(chunk)))
			b.ResetTimer()
			for range b.N {
				if _, err := c.Write(chunk); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// benchFastLab makes the lab (the fast path on or not), a server on the
// outside's port (82 echoes, 83 discards) and a connection to it from pod
// 0, warmed past the fast path's threshold.
func benchFastLab(b *testing.B, fast bool, port uint16) net.Conn {
	l := labtest.New(b, 1)
	outside := labtest.OpenNS(b, "fo")
	out4 := netip.MustParseAddr("192.168.97.2")
	_, _, err := l.Host.EnsureVeth(netops.VethOpts{HostName: "vout", PeerName: "eth0", Peer: outside})
	must(b, err)
	must(b, l.Host.EnsureAddr("vout", netip.MustParsePrefix("192.168.97.1/24"), netops.AddrOpts{}))
	must(b, outside.EnsureAddr("eth0", netip.PrefixFrom(out4, 24), netops.AddrOpts{}))
	must(b, outside.EnsureRoute(netops.Route{Dst: netip.MustParsePrefix("10.99.0.0/24"), GW: netip.MustParseAddr("192.168.97.1"), Dev: "eth0"}))
	must(b, l.Host.SetSysctls(netops.SysctlSetting{Key: "net.ipv4.ip_forward", Value: "1"}))
	if fast {
		_, err := l.Host.NFT().EnsureFastPath(nft.FastPathSpec{Devices: []string{"br0", "vout"}})
		nstest.SkipIfKernelLacks(b, "nftables flowtables", err)
		must(b, err)
	}
	nstest.ServeEcho(b, outside.Path(), netip.AddrPortFrom(out4, port), port != 82)
	var c net.Conn
	must(b, nstest.Run(b, l.Pods[0].Path(), func() error {
		c, err = net.DialTimeout("tcp", netip.AddrPortFrom(out4, port).String(), 5*time.Second)
		return err
	}))
	b.Cleanup(func() { c.Close() })
	if port == 82 {
		buf := []byte{1}
		for range 2 * nft.DefaultFastPathAfter {
			c.Write(buf)
			io.ReadFull(c, buf)
		}
	} else {
		c.Write(make([]byte, 1<<20))
	}
	return c
}

// BenchmarkFastPathReset: one ResetFastPath (a flowtable on two devices
// deleted and made again in one transaction): what every policy
// transaction and, with the fast path on, every pod's DEL adds.
func BenchmarkFastPathReset(b *testing.B) {
	l := labtest.New(b, 1)
	n := l.Host.NFT()
	_, err := n.EnsureFastPath(nft.FastPathSpec{Devices: []string{"br0", "veth0"}})
	nstest.SkipIfKernelLacks(b, "nftables flowtables", err)
	must(b, err)
	b.ResetTimer()
	for range b.N {
		must(b, n.ResetFastPath())
	}
}

// TestFastPathPaths: what the fast path must not break, on the paths a
// node forwards: a pod's connection masqueraded on its way out (the
// server sees the node's address), a host port mapped to a pod (a
// connection from outside to the node's address reaches the pod), and a
// VXLAN overlay between the node and the outside (flannel's device:
// static neighbour and FDB entries). Each connection is offloaded (its
// packets stop reaching the forward hook) and goes on carrying data, with
// its NAT, once it is.
func TestFastPathPaths(t *testing.T) {
	t.Parallel()
	for _, path := range []string{"masquerade", "host port", "vxlan"} {
		t.Run(path, func(t *testing.T) {
			l := newFastLab(t)
			devs := []string{"br0", "vout"}
			from, to := l.Pods[0].Path(), l.out4
			port := uint16(82)
			switch path {
			case "masquerade":
				must(t, l.Host.NFT().EnsureMasq("labnet", []netip.Prefix{netip.MustParsePrefix("10.99.0.2/24")}))
			case "host port":
				_, err := l.Host.NFT().EnsurePortMaps(nft.PortMaps{Owner: "test", Mappings: []nft.PortMapping{
					{Proto: nft.ProtoTCP, HostPort: 8082, PodIP: netip.MustParseAddr("10.99.0.3"), PodPort: 82}}})
				must(t, err)
				from, to, port = l.outside.Path(), netip.MustParseAddr("192.168.97.1"), 8082
			case "vxlan":
				to = fastVXLAN(t, l)
				devs = []string{"br0", "vx0"}
			}
			_, err := l.Host.NFT().EnsureFastPath(nft.FastPathSpec{Devices: devs})
			nstest.SkipIfKernelLacks(t, "nftables flowtables", err)
			must(t, err)
			w := newForwardWatch(t, l.Host)
			nstest.WaitLinksUp(t, l.Host.Path())
			offloaded(t, w, dialEchoer(t, from, netip.AddrPortFrom(to, port)))
			if path == "masquerade" {
				srv := nstest.Serve(t, l.outside.Path(), l.out4)
				if got := nstest.SeenFrom(t, from, srv); got != netip.MustParseAddr("192.168.97.1") {
					t.Errorf("the masqueraded pod is seen as %v, want the node's 192.168.97.1", got)
				}
			}
		})
	}
}

// fastVXLAN joins the lab's host and outside by VXLAN device vx0 (VNI 7)
// over vout, flannel's way: no learning, the peer's MAC in the neighbour
// table and its VTEP in the FDB; the outside's vx0 holds 10.200.0.2,
// served on port 82, and routes the pods' subnet back through the tunnel.
func fastVXLAN(t *testing.T, l *fastLab) netip.Addr {
	type end struct {
		h           *netops.Handle
		under, addr netip.Addr
	}
	ends := []end{{l.Host, netip.MustParseAddr("192.168.97.1"), netip.MustParseAddr("10.200.0.1")},
		{l.outside, l.out4, netip.MustParseAddr("10.200.0.2")}}
	var vs []netops.VXLAN
	for i, e := range ends {
		dev := "vout"
		if i == 1 {
			dev = "eth0"
		}
		v, _, err := e.h.EnsureVXLAN(netops.VXLANOpts{Name: "vx0", VNI: 7, Local: e.under, Dev: dev})
		nstest.SkipIfKernelLacks(t, "VXLAN", err)
		must(t, err)
		must(t, e.h.EnsureAddr("vx0", netip.PrefixFrom(e.addr, 24), netops.AddrOpts{}))
		vs = append(vs, v)
	}
	for i, e := range ends {
		peer := ends[1-i]
		must(t, e.h.EnsureNeigh("vx0", peer.addr, vs[1-i].MAC))
		must(t, e.h.EnsureFDB("vx0", vs[1-i].MAC, peer.under))
	}
	must(t, l.outside.EnsureRoute(netops.Route{Dst: netip.MustParsePrefix("10.99.0.0/24"), GW: ends[0].addr, Dev: "vx0"}))
	nstest.ServeEcho(t, l.outside.Path(), netip.AddrPortFrom(ends[1].addr, 82), false)
	return ends[1].addr
}
