package nft

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/google/nftables"
	"golang.org/x/sys/unix"

	"github.com/cnibox/cnibox/netops/internal/ifname"
)

// SourceCheckGap is an element of a port's source address check that the
// kernel does not have (SourceCheckGaps).
type SourceCheckGap struct {
	// Table is the check's table as nft names it: "inet cnibox-src".
	Table string
	// Set is the set the element belongs in: "ports", "addr4" or "addr6".
	Set string
	// Addr is the pod's address of an address element; the zero Addr for
	// the port's element of set ports, without which the port is not
	// checked at all.
	Addr netip.Addr
}

// SourceCheckGaps returns the elements of port's check against the pod's
// addresses addrs (kind says where port is; with IPv6, its link-local
// address too: srcAddrs) that the kernel lacks, table by table, the port's
// element first. Each element is looked up with a
// single-element get: the cost does not grow with the node's pods, as a
// dump of the sets would. A table or set that is not there lacks all of
// its elements.
func (h *Handle) SourceCheckGaps(kind SrcCheckKind, port string, addrs []netip.Addr) ([]SourceCheckGap, error) {
	if err := ifname.Check("verify source address check", port); err != nil {
		return nil, err
	}
	if _, err := h.nftConn(); err != nil {
		return nil, err
	}
	var gaps []SourceCheckGap
	for _, t := range kind.tables() {
		want := []SourceCheckGap{{Set: srcPorts}}
		for _, a := range srcAddrs(port, addrs) {
			switch {
			case a.Is4():
				want = append(want, SourceCheckGap{Set: srcAddr4, Addr: a})
			case t.v6:
				want = append(want, SourceCheckGap{Set: srcAddr6, Addr: a})
			}
		}
		for _, g := range want {
			key := ifnameKey(port)
			if g.Addr.IsValid() {
				key = srcKey(port, g.Addr)
			}
			_, err := h.getFamilyElem(t.family, SrcCheckTable, g.Set, key)
			switch {
			case err == nil:
			case errors.Is(err, unix.ENOENT):
				g.Table = FamilyName(t.family) + " " + SrcCheckTable
				gaps = append(gaps, g)
			default:
				return nil, fmt.Errorf("look up the source address check of %s in %s: %w", port, h.where(), classify(err))
			}
		}
	}
	return gaps, nil
}

// FamilyName is the name nft gives table family f.
func FamilyName(f nftables.TableFamily) string {
	switch f {
	case nftables.TableFamilyIPv4:
		return "ip"
	case nftables.TableFamilyIPv6:
		return "ip6"
	case nftables.TableFamilyINet:
		return "inet"
	case nftables.TableFamilyBridge:
		return "bridge"
	case nftables.TableFamilyARP:
		return "arp"
	case nftables.TableFamilyNetdev:
		return "netdev"
	}
	return fmt.Sprint(uint8(f))
}
