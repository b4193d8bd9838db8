package nft

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// The conntrack entries of a pod's addresses, deleted when the address
// changes hands, so that the verdict cache can come before the pending
// check (policy_entry.go).
//
// The verdict cache accepts a packet whose connection's mark says "allowed
// at this generation", and a CNI ADD marks a new pod's addresses pending
// without starting a new generation. An entry that an address's earlier
// pod left (its connection allowed and marked at the current generation)
// would carry the peer's packets to the new pod, pending or not, until the
// agent's next transaction. So MarkPolicyPending deletes, after the
// elements are in (attached, and pending where guarded) and before the pod
// has its addresses, every entry whose original or reply source is one of
// the addresses: the two addresses the policy judges a connection by.
// Whatever entry is made after the elements went in starts with no mark
// (a new entry's mark is 0; no generation is 0), so the cache does not
// accept it: it meets the pending drop, or the walk. One made before is
// gone. A pod's DEL deletes them too (UnhookPod, where the address was
// attached), so a dead pod's connections do not linger; the ADD's delete
// is the one the guarantee rests on (a peer's retransmission can make a new
// entry between the DEL and the next ADD, which the walk allowed while the
// agent still placed the old pod there).
//
// The agent's own changes need none: each of its transactions starts a new
// generation, so an entry marked before it is judged again at its next
// packet, after the pending check of the address the transaction closed.
//
// netlink's conntrack delete dumps the namespace's table and deletes the
// matching entries one by one (as DeleteConntrackTo and `conntrack -D`):
// its cost grows with the node's tracked connections (docs/policy.md).

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
