package nft

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	mdnetlink "github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// The chain list of a table the spec owns, read raw: with each chain's use
// count (NFTA_CHAIN_USE: its rules and the jumps and verdict map elements
// that refer to it, as the kernel counts them), which google/nftables'
// ListChains drops, and which tells a chain the spec's mark says is
// whole (core_marks.go) from one someone added a rule to or deleted one
// of (or flushed).

// dumpTableChains lists the chains of table, by name, with their use
// counts (one dump of the family's chains, as ListChainsOfTableFamily).
func (h *Handle) dumpTableChains(table *nftables.Table) (map[string]*nftables.Chain, map[string]uint32, error) {
	m := pmMsg(unix.NFT_MSG_GETCHAIN, mdnetlink.Dump, nil)
	m.Data[0] = byte(table.Family)
	msgs, err := h.dump(m)
	chains, uses := map[string]*nftables.Chain{}, map[string]uint32{}
	if errors.Is(err, unix.ENOENT) {
		return chains, uses, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("list chains: %w", err)
	}
	for _, m := range msgs {
		ch, tname, use, err := parseChain(m.Data)
		if err != nil {
			return nil, nil, fmt.Errorf("list chains: %w", err)
		}
		if ch == nil || tname != table.Name {
			continue
		}
		ch.Table = table
		chains[ch.Name], uses[ch.Name] = ch, use
	}
	return chains, uses, nil
}

// parseChain decodes one NFT_MSG_NEWCHAIN of a dump (b: after the netlink
// header): the chain (name, hook, priority, type), its table's name and
// its use count; nil for a message too short to be one.
func parseChain(b []byte) (ch *nftables.Chain, table string, use uint32, err error) {
	if len(b) < 4 {
		return nil, "", 0, nil
	}
	ad, err := mdnetlink.NewAttributeDecoder(b[4:])
	if err != nil {
		return nil, "", 0, err
	}
	ad.ByteOrder = binary.BigEndian
	ch = &nftables.Chain{}
	for ad.Next() {
		switch ad.Type() {
		case unix.NFTA_CHAIN_TABLE:
			table = ad.String()
		case unix.NFTA_CHAIN_NAME:
			ch.Name = ad.String()
		case unix.NFTA_CHAIN_USE:
			use = ad.Uint32()
		case unix.NFTA_CHAIN_TYPE:
			ch.Type = nftables.ChainType(ad.String())
		case unix.NFTA_CHAIN_POLICY:
			p := nftables.ChainPolicy(ad.Uint32())
			ch.Policy = &p
		case unix.NFTA_CHAIN_HOOK:
			ad.Nested(func(nd *mdnetlink.AttributeDecoder) error {
				nd.ByteOrder = binary.BigEndian
				for nd.Next() {
					switch nd.Type() {
					case unix.NFTA_HOOK_HOOKNUM:
						ch.Hooknum = nftables.ChainHookRef(nftables.ChainHook(nd.Uint32()))
					case unix.NFTA_HOOK_PRIORITY:
						ch.Priority = nftables.ChainPriorityRef(nftables.ChainPriority(int32(nd.Uint32())))
					}
				}
				return nil
			})
		}
	}
	return ch, table, use, ad.Err()
}

// chainUses is what the kernel's use count of each chain of s is when the
// table is s: its rules, and the jumps (and gotos) to it of the rules and
// of the elements of the sets that are s's. (A kept verdict map's jumps
// are others': a chain they jump to counts more, and is dumped.)
func (s *tableSpec) chainUses() map[string]uint32 {
	uses := make(map[string]uint32, len(s.chains))
	for _, cs := range s.chains {
		rules := cs.ruleSet()
		uses[cs.name] += uint32(len(rules))
		for _, r := range rules {
			for _, e := range r.Exprs {
				if v, ok := e.(*expr.Verdict); ok && v.Chain != "" && (v.Kind == expr.VerdictJump || v.Kind == expr.VerdictGoto) {
					uses[v.Chain]++
				}
			}
		}
	}
	for _, ss := range s.sets {
		for _, e := range ss.elems {
			if e.VerdictData != nil && e.VerdictData.Chain != "" {
				uses[e.VerdictData.Chain]++
			}
		}
	}
	return uses
}
