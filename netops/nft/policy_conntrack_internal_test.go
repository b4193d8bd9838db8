package nft

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/cnibox/cnibox/netops/nstest"
)

// The conntrack delete a CNI ADD would need for the policy table's
// verdict cache to come before the pending check (docs/benchmarks.md, "The
// per-packet cuts"): kept here, in a test, with the benchmark that showed
// its cost (netlink's delete is a dump, whose kernel-side walk covers every
// bucket of the conntrack hash table all namespaces share), so that an
// approach that removes the walk can be measured against it.

// flushConntrackOf deletes the conntrack entries (IPv4 and IPv6, as addrs
// hold) whose original or reply source is one of addrs, and reports how
// many went; none is no error. A Handle on a test's in-memory kernel
// (OpenDial) has no conntrack: nothing is done.
func (h *Handle) flushConntrackOf(addrs []netip.Addr) (uint, error) {
	if h.dial != nil || len(addrs) == 0 {
		return 0, nil
	}
	f := conntrackOf{addrs: map[netip.Addr]bool{}}
	fam4, fam6 := false, false
	for _, a := range addrs {
		a = a.Unmap()
		f.addrs[a] = true
		fam4, fam6 = fam4 || a.Is4(), fam6 || a.Is6()
	}
	var (
		nfh *netlink.Handle
		err error
	)
	if h.nsFD < 0 {
		nfh, err = netlink.NewHandle(unix.NETLINK_NETFILTER)
	} else {
		nfh, err = netlink.NewHandleAt(netns.NsHandle(h.nsFD), unix.NETLINK_NETFILTER)
	}
	if err != nil {
		return 0, fmt.Errorf("open conntrack socket in %s: %w", h.where(), err)
	}
	defer nfh.Close()
	var n uint
	for _, fam := range []struct {
		on bool
		f  netlink.InetFamily
	}{{fam4, unix.AF_INET}, {fam6, unix.AF_INET6}} {
		if !fam.on {
			continue
		}
		// A dump the table's changes interrupted may have missed entries:
		// again, a few times.
		for try := 0; ; try++ {
			k, err := nfh.ConntrackDeleteFilters(netlink.ConntrackTable, fam.f, f)
			n += k
			if err == nil {
				break
			}
			if !errors.Is(err, netlink.ErrDumpInterrupted) || try == 3 {
				return n, fmt.Errorf("delete the conntrack entries of %v in %s: %w", addrs, h.where(), err)
			}
		}
	}
	return n, nil
}

// conntrackOf matches the flows whose original or reply source is one of
// addrs.
type conntrackOf struct{ addrs map[netip.Addr]bool }

func (c conntrackOf) MatchConntrackFlow(flow *netlink.ConntrackFlow) bool {
	for _, ip := range [...][]byte{flow.Forward.SrcIP, flow.Reverse.SrcIP} {
		if a, ok := netip.AddrFromSlice(ip); ok && c.addrs[a.Unmap()] {
			return true
		}
	}
	return false
}

// ctLab is a namespace's nft Handle and a conntrack socket in it that
// makes UDP entries.
type ctLab struct {
	h   *Handle
	nfh *netlink.Handle
}

func newCTLab(tb testing.TB) *ctLab {
	nstest.RequireRoot(tb)
	h, err := Open(nstest.NewNS(tb, "pct"))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { h.Close() })
	nfh, err := netlink.NewHandleAt(netns.NsHandle(h.nsFD), unix.NETLINK_NETFILTER)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(nfh.Close)
	return &ctLab{h: h, nfh: nfh}
}

// add makes the UDP entry src:sport -> dst:53, its reply from replySrc.
func (l *ctLab) add(tb testing.TB, src, dst, replySrc string, sport uint16) {
	fam := netlink.InetFamily(unix.AF_INET)
	ip := func(s string) net.IP { return net.IP(netip.MustParseAddr(s).AsSlice()) }
	if netip.MustParseAddr(src).Is6() {
		fam = unix.AF_INET6
	}
	f := &netlink.ConntrackFlow{FamilyType: uint8(fam), TimeOut: 100,
		Forward: netlink.IPTuple{SrcIP: ip(src), DstIP: ip(dst), Protocol: unix.IPPROTO_UDP, SrcPort: sport, DstPort: 53},
		Reverse: netlink.IPTuple{SrcIP: ip(replySrc), DstIP: ip(src), Protocol: unix.IPPROTO_UDP, SrcPort: 53, DstPort: sport}}
	if err := l.nfh.ConntrackCreate(netlink.ConntrackTable, fam, f); err != nil {
		tb.Fatalf("make the conntrack entry %s -> %s: %v", src, dst, err)
	}
}

func (l *ctLab) count(tb testing.TB, fam netlink.InetFamily) int {
	flows, err := l.nfh.ConntrackTableList(netlink.ConntrackTable, fam)
	if err != nil {
		tb.Fatal(err)
	}
	return len(flows)
}

// TestFlushConntrackOf: the entries whose original source (a connection
// the pod made) or reply source (one made to it, DNATed or not) is one of
// the addresses go, IPv4 and IPv6; the others stay; none is no error.
func TestFlushConntrackOf(t *testing.T) {
	l := newCTLab(t)
	l.add(t, "10.1.0.5", "10.1.0.9", "10.1.0.9", 1000)   // from the pod
	l.add(t, "10.1.0.9", "10.1.0.5", "10.1.0.5", 1001)   // to the pod
	l.add(t, "10.1.0.9", "10.96.0.10", "10.1.0.5", 1002) // to the pod through a DNAT
	l.add(t, "10.1.0.7", "10.1.0.8", "10.1.0.8", 1003)   // another pod's
	l.add(t, "fd01::5", "fd01::9", "fd01::9", 1004)      // from the pod, IPv6
	l.add(t, "fd01::7", "fd01::8", "fd01::8", 1005)      // another's
	n, err := l.h.flushConntrackOf([]netip.Addr{netip.MustParseAddr("10.1.0.5"), netip.MustParseAddr("fd01::5")})
	if err != nil || n != 4 {
		t.Errorf("flushConntrackOf = %d, %v; want 4 entries", n, err)
	}
	if c4, c6 := l.count(t, unix.AF_INET), l.count(t, unix.AF_INET6); c4 != 1 || c6 != 1 {
		t.Errorf("left: %d IPv4, %d IPv6 entries; want the other pods' 1 and 1", c4, c6)
	}
	if n, err := l.h.flushConntrackOf([]netip.Addr{netip.MustParseAddr("10.1.0.5")}); err != nil || n != 0 {
		t.Errorf("again: %d, %v; want 0, nil", n, err)
	}
}

// BenchmarkFlushConntrackOf: what the delete costs a CNI ADD (on a node
// with the policy table) as the node's conntrack table grows: other pods'
// entries, none of them the address's.
func BenchmarkFlushConntrackOf(b *testing.B) {
	for _, n := range []int{0, 1000, 10000, 50000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			l := newCTLab(b)
			for i := range n {
				src := fmt.Sprintf("10.2.%d.%d", i/250%250, i%250+1)
				l.add(b, src, "10.3.0.1", "10.3.0.1", uint16(1024+i/62500))
			}
			addr := []netip.Addr{netip.MustParseAddr("10.1.0.5")}
			b.ResetTimer()
			for range b.N {
				if _, err := l.h.flushConntrackOf(addr); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
