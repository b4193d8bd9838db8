package nft

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"sort"

	"github.com/google/nftables"
	mdnetlink "github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// DeleteSourceCheck removes the check of port (kind says where it is), in
// one transaction: the elements of addrs, the pod's addresses, and of the
// port. When addrs is empty or misses some of the port's elements, it
// reads the port's elements from the sets (a dump each) and removes those.
// What is gone already is no error.
func (h *Handle) DeleteSourceCheck(kind SrcCheckKind, port string, addrs []netip.Addr) error {
	if _, err := h.nftConn(); err != nil {
		return err
	}
	if len(addrs) > 0 {
		err := h.commitRaw(srcElemMsgs(kind, port, addrs, unix.NFT_MSG_DELSETELEM, mdnetlink.Acknowledge, true)...)
		if err == nil {
			return nil
		}
		if !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("delete source address check of %s in %s: %w", port, h.where(), classify(err))
		}
	}
	if err := h.sweepSourceCheck(kind, port); err != nil {
		return fmt.Errorf("delete source address check of %s in %s: %w", port, h.where(), classify(err))
	}
	return nil
}

// sweepSourceCheck removes every element of port from the tables of kind,
// found by dumping the sets. An element removed by someone else between
// the dump and the delete makes the kernel refuse the batch (ENOENT): the
// sets are read again, a few times.
func (h *Handle) sweepSourceCheck(kind SrcCheckKind, port string) error {
	prefix := ifnameKey(port)
	for try := 0; ; try++ {
		var msgs []mdnetlink.Message
		for _, t := range kind.tables() {
			for _, set := range []string{srcPorts, srcAddr4, srcAddr6} {
				if set == srcAddr6 && !t.v6 {
					continue
				}
				elems, err := h.dumpSrcElems(t.family, set)
				if err != nil {
					return err
				}
				var mine []nftElem
				for _, e := range elems {
					if bytes.HasPrefix(e.key, prefix) {
						mine = append(mine, nftElem{key: e.key})
					}
				}
				if len(mine) > 0 {
					msgs = append(msgs, srcMsg(t.family, set, unix.NFT_MSG_DELSETELEM, mdnetlink.Acknowledge, mine))
				}
			}
		}
		if len(msgs) == 0 {
			return nil
		}
		err := h.commitRaw(msgs...)
		if err == nil || !errors.Is(err, unix.ENOENT) || try == 2 {
			return err
		}
	}
}

// dumpSrcElems lists the elements of set in the check's table of family;
// no table or set lists nothing.
func (h *Handle) dumpSrcElems(family nftables.TableFamily, set string) ([]nftElem, error) {
	return h.dumpFamilyElems(family, SrcCheckTable, set)
}

// SourceCheckPorts returns the ports checked in the tables of kind, sorted:
// GC finds there the checks whose port is gone.
func (h *Handle) SourceCheckPorts(kind SrcCheckKind) ([]string, error) {
	if _, err := h.nftConn(); err != nil {
		return nil, err
	}
	elems, err := h.dumpSrcElems(kind.tables()[0].family, srcPorts)
	if err != nil {
		return nil, fmt.Errorf("list source address checks in %s: %w", h.where(), classify(err))
	}
	ports := make([]string, 0, len(elems))
	for _, e := range elems {
		ports = append(ports, string(bytes.TrimRight(e.key, "\x00")))
	}
	sort.Strings(ports)
	return ports, nil
}

// SourceCheckAddrs returns the addresses port may send from in the tables
// of kind (CHECK, tests), sorted.
func (h *Handle) SourceCheckAddrs(kind SrcCheckKind, port string) ([]netip.Addr, error) {
	if _, err := h.nftConn(); err != nil {
		return nil, err
	}
	t := kind.tables()[0]
	prefix := ifnameKey(port)
	var out []netip.Addr
	for _, set := range []string{srcAddr4, srcAddr6} {
		elems, err := h.dumpSrcElems(t.family, set)
		if err != nil {
			return nil, fmt.Errorf("list source address checks in %s: %w", h.where(), classify(err))
		}
		for _, e := range elems {
			if !bytes.HasPrefix(e.key, prefix) {
				continue
			}
			if a, ok := netip.AddrFromSlice(e.key[len(prefix):]); ok {
				out = append(out, a)
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Less(out[j]) })
	return out, nil
}
