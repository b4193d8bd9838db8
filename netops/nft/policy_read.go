package nft

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strings"

	"github.com/google/nftables"
	mdnetlink "github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// Reading the policy table: for `cnibox inspect policy`, the agent's
// metrics and the tests.

// PolicyCounter is one counter of the policy table.
type PolicyCounter struct {
	Packets, Bytes uint64
}

// PolicyCounters returns the policy table's counters by name
// (policymodel.CounterName of a key); none when there is no table.
func (h *Handle) PolicyCounters() (map[string]PolicyCounter, error) {
	out := map[string]PolicyCounter{}
	if _, err := h.nftConn(); err != nil {
		return nil, err
	}
	if tb, _ := h.nft.ListTableOfFamily(PolicyTable, policyFamily); tb == nil {
		return out, nil
	}
	objs, err := consistently(h, func() ([]nftables.Obj, error) { return h.nft.GetObjects(policyTableObj()) })
	if err != nil {
		return nil, fmt.Errorf("read the policy counters in %s: %w", h.where(), err)
	}
	for _, o := range objs {
		if c, ok := o.(*nftables.CounterObj); ok {
			out[c.Name] = PolicyCounter{Packets: c.Packets, Bytes: c.Bytes}
		}
	}
	return out, nil
}

// PolicyRuleHandles returns the handles of the rules of every chain of the
// policy table, "chain:handle", sorted: what stays the same when only set
// elements change. (A raw dump: google/nftables cannot parse these rules'
// ct direction, see ctDir.)
func (h *Handle) PolicyRuleHandles() ([]string, error) {
	if _, err := h.nftConn(); err != nil {
		return nil, err
	}
	msgs, err := h.dump(pmMsg(unix.NFT_MSG_GETRULE, mdnetlink.Dump, attrs(
		mdnetlink.Attribute{Type: unix.NFTA_RULE_TABLE, Data: cstr(PolicyTable)},
	)))
	if errors.Is(err, unix.ENOENT) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list the policy rules in %s: %w", h.where(), err)
	}
	var out []string
	for _, m := range msgs {
		if len(m.Data) < 4 {
			continue
		}
		ad, err := mdnetlink.NewAttributeDecoder(m.Data[4:])
		if err != nil {
			return nil, err
		}
		ad.ByteOrder = binary.BigEndian
		var table, chain string
		var handle uint64
		for ad.Next() {
			switch ad.Type() {
			case unix.NFTA_RULE_TABLE:
				table = ad.String()
			case unix.NFTA_RULE_CHAIN:
				chain = ad.String()
			case unix.NFTA_RULE_HANDLE:
				handle = ad.Uint64()
			}
		}
		if table == PolicyTable {
			out = append(out, fmt.Sprintf("%s:%d", chain, handle))
		}
	}
	sort.Strings(out)
	return out, nil
}

// PolicySetAddrs returns the addresses (or prefixes' starts) in set name,
// both families; ok is false when the table has no such set.
func (h *Handle) PolicySetAddrs(name string) (addrs []netip.Addr, ok bool, err error) {
	if _, err := h.nftConn(); err != nil {
		return nil, false, err
	}
	for _, v6 := range []bool{false, true} {
		m, err := h.policyAddrs(name, v6)
		if err != nil {
			return nil, false, err
		}
		if exists, _ := h.nftSetExists(uint8(policyFamily), PolicyTable, policySetName(name, v6)); exists {
			ok = true
		}
		for a := range m {
			addrs = append(addrs, a)
		}
	}
	sort.Slice(addrs, func(i, j int) bool { return addrs[i].Less(addrs[j]) })
	return addrs, ok, nil
}

// PolicySets returns the names of the policy table's address sets (without
// the family suffix; the verdict cache's sets and maps and the flow log's
// meters and the chain marks left out).
func (h *Handle) PolicySets() ([]string, error) {
	if _, err := h.nftConn(); err != nil {
		return nil, err
	}
	st, err := h.readPolicy(true, true, false)
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	var out []string
	for n := range st.sets {
		if slices.Contains(policyGenSets[:], n) || isPolicyLogSet(n) || n == policyMarksSet {
			continue
		}
		base := strings.TrimSuffix(strings.TrimSuffix(n, "-4"), "-6")
		if !seen[base] {
			seen[base] = true
			out = append(out, base)
		}
	}
	sort.Strings(out)
	return out, nil
}
