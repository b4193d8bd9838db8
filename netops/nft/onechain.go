package nft

import (
	"fmt"
	"slices"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/google/nftables/userdata"
)

// oneChain is a table of cnibox's own with one base chain whose rules say
// what they do in their comments (the egress table, the overlay's
// masquerade): its spec is built with commented rules, it is deleted whole,
// and it is read back as the comments of its rules (for checks and
// `cnibox inspect`).
type oneChain struct {
	table *nftables.Table
	chain string
	// what names the table in errors ("egress").
	what string
}

// commentedRule is a rule of exprs, in order, with comment.
func commentedRule(comment string, exprs ...[]expr.Any) *nftables.Rule {
	return &nftables.Rule{Exprs: slices.Concat(exprs...), UserData: userdata.AppendString(nil, userdata.TypeComment, comment)}
}

// drop deletes the table. A missing table is not an error.
func (o oneChain) drop(h *Handle) error {
	if err := h.deleteTable(o.table); err != nil {
		return fmt.Errorf("delete %s in %s: %w", o.what, h.where(), err)
	}
	return nil
}

// comments returns the comments of the chain's rules, in order; nil when
// the chain (or the table) is not there.
func (o oneChain) comments(h *Handle) ([]string, error) {
	out, err := h.chainComments(o.table, o.chain)
	if err != nil {
		return nil, fmt.Errorf("list %s rules in %s: %w", o.what, h.where(), err)
	}
	return out, nil
}

// chainComments returns the comments of the rules of chain in table, in
// order; nil when the chain (or table) is not there.
func (h *Handle) chainComments(table *nftables.Table, chain string) ([]string, error) {
	c, err := h.nftConn()
	if err != nil {
		return nil, err
	}
	ok, err := h.nftChainExists(uint8(table.Family), table.Name, chain)
	if err != nil || !ok {
		return nil, err
	}
	rules, err := c.GetRules(table, &nftables.Chain{Name: chain, Table: table})
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(rules))
	for _, r := range rules {
		s, _ := userdata.GetString(r.UserData, userdata.TypeComment)
		out = append(out, s)
	}
	return out, nil
}
