package nft

import (
	"fmt"
	"net/netip"

	"github.com/google/nftables"
)

// PodUnhook is what a pod's DEL takes out of cnibox's tables for its
// addresses IPs: always their elements in the policy table's attached and
// pending sets (absent when no agent made the table), and, as the
// attachment had them, its masquerade entries and its host port's source
// address check.
type PodUnhook struct {
	IPs []netip.Addr
	// Masq: the masquerade entries of IPs (table inet cnibox).
	Masq bool
	// CheckedPort is the host port whose source address check goes (""
	// none), CheckKind where it is.
	CheckedPort string
	CheckKind   SrcCheckKind
}

// UnhookPod removes u's elements, those that exist (found with a get
// each), in one nftables transaction: each transaction that deletes
// leaves the kernel cleanup that waits for an RCU grace period, and the
// DEL's veth delete after it hides one such wait but not three (a bridge
// DEL with the policy, source check and masquerade deletes each in its own
// transaction took 8 ms longer: go run ./test/ab -case bridge). When some
// of the checked port's elements are not where IPs say (the addresses are
// not known, or changed), the port's elements are then found by dumping
// the sets and deleted (DeleteSourceCheck's sweep). What is gone already
// is no error.
func (h *Handle) UnhookPod(u PodUnhook) error {
	if _, err := h.nftConn(); err != nil {
		return err
	}
	var k4, k6 [][]byte
	for _, a := range u.IPs {
		if !a.IsValid() {
			return fmt.Errorf("unhook pod: invalid address %v", a)
		}
		if a = a.Unmap(); a.Is4() {
			k4 = append(k4, a.AsSlice())
		} else {
			k6 = append(k6, a.AsSlice())
		}
	}
	inet := func(table, set string, keys [][]byte) elemKeys {
		return elemKeys{family: nftables.TableFamilyINet, table: table, set: set, keys: keys}
	}
	refs := []elemKeys{
		inet(PolicyTable, policySetName(PolicyAttached, false), k4), inet(PolicyTable, policySetName(PolicyAttached, true), k6),
		inet(PolicyTable, policySetName(PolicyPending, false), k4), inet(PolicyTable, policySetName(PolicyPending, true), k6),
	}
	if u.Masq {
		refs = append(refs, inet(MasqTable, masqMap4, k4), inet(MasqTable, masqMap6, k6))
	}
	checked, want := len(refs), 0
	if u.CheckedPort != "" {
		for _, t := range u.CheckKind.tables() {
			groups, n := srcKeyGroups(t, u.CheckedPort, u.IPs)
			for _, g := range groups {
				refs = append(refs, elemKeys{family: t.family, table: SrcCheckTable, set: g.set, keys: g.keys})
			}
			want += n
		}
	}
	present, err := h.delPresent(refs)
	if err != nil {
		return fmt.Errorf("unhook pod %v in %s: %w", u.IPs, h.where(), classify(err))
	}
	got := 0
	for _, n := range present[checked:] {
		got += n
	}
	if u.CheckedPort != "" && (len(u.IPs) == 0 || got < want) {
		if err := h.sweepSourceCheck(u.CheckKind, u.CheckedPort); err != nil {
			return fmt.Errorf("delete source address check of %s in %s: %w", u.CheckedPort, h.where(), classify(err))
		}
	}
	return nil
}

// srcKeyGroups are the keys of port's elements in table t, the port's own
// and one per address of addrs that t checks, and how many they are. With
// an IPv6 address among addrs, the pod's link-local address (srcAddrs) is
// one of them.
func srcKeyGroups(t srcTable, port string, addrs []netip.Addr) ([]setKeys, int) {
	groups := []setKeys{{srcPorts, [][]byte{ifnameKey(port)}}, {srcAddr4, nil}, {srcAddr6, nil}}
	n := 1
	for _, a := range srcAddrs(port, addrs) {
		switch {
		case a.Is4():
			groups[1].keys = append(groups[1].keys, srcKey(port, a))
		case t.v6:
			groups[2].keys = append(groups[2].keys, srcKey(port, a))
		default:
			continue
		}
		n++
	}
	return groups, n
}
