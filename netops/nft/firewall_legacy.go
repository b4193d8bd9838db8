package nft

import (
	"errors"
	"fmt"
	"strings"

	"github.com/google/nftables"
	"golang.org/x/sys/unix"
)

// The older layout (cnibox before the maps): a rule per pod address in
// CNI-FORWARD and, for an ingressPolicy, in CNI-ISOLATION, of iptables'
// filter or of tables ip/ip6 cnibox-firewall, each with its owner as
// comment. Pods an older cnibox added keep those rules until their DEL (or
// GC), which finds them by listing the two chains, under the caller's lock
// (a listing that another deletion interrupts can skip rules). Once no
// owner's rule is left in a table, the table's CNI-ISOLATION (and the jump
// to it) goes: its absence, one single get, tells later calls that there
// is nothing to look for. The chains CNI-FORWARD, the admin chain with the
// operators' rules and the older own tables stay.

// fwLegacyPlaces are the tables the older layout used.
func fwLegacyPlaces() []fwPlace {
	var out []fwPlace
	for _, f := range fwFamilies {
		out = append(out, fwPlace{table: &nftables.Table{Family: f.table, Name: fwIptablesTable}},
			fwPlace{table: &nftables.Table{Family: f.table, Name: FirewallTable}, own: true})
	}
	return out
}

// fwOwner returns a rule's owner comment, or "" for the jumps and shared
// rules.
func fwOwner(r *nftables.Rule) string {
	if c := ruleComment(r); strings.HasPrefix(c, fwOwnerPrefix) {
		return c
	}
	return ""
}

// fwLegacyDelete deletes the older layout's rules whose owner del reports
// true for, and retires the layout in the tables left without any.
func (h *Handle) fwLegacyDelete(del func(string) bool, lock func() (func(), error)) error {
	var found []fwPlace
	for _, p := range fwLegacyPlaces() {
		ok, err := h.nftChainExists(uint8(p.table.Family), p.table.Name, FirewallIsolationChain)
		if err != nil {
			return fmt.Errorf("look for the older firewall rules in %s %s: %w", familyName(p), p.table.Name, err)
		}
		if ok {
			found = append(found, p)
		}
	}
	if len(found) == 0 {
		return nil
	}
	unlock, err := takeLock(lock)
	if err != nil {
		return err
	}
	defer unlock()
	var errs []error
	for _, p := range found {
		errs = append(errs, h.fwLegacyDeleteIn(p, del))
	}
	return errors.Join(errs...)
}

func (h *Handle) fwLegacyDeleteIn(p fwPlace, del func(string) bool) error {
	fwd, err := h.fwRules(p, FirewallForwardChain)
	if err != nil {
		return err
	}
	t := h.tx()
	iso, err := h.fwRules(p, FirewallIsolationChain)
	if err != nil {
		return err
	}
	left := 0
	for _, r := range append(fwd, iso...) {
		o := fwOwner(r)
		switch {
		case o == "":
		case del(o):
			if err := t.conn().DelRule(r); err != nil {
				t.abort()
				return err
			}
		default:
			left++
		}
	}
	if left == 0 {
		for _, r := range fwd {
			if fwFindJump([]*nftables.Rule{r}, FirewallIsolationChain) == 0 {
				if err := t.conn().DelRule(r); err != nil {
					t.abort()
					return err
				}
			}
		}
		t.conn().FlushChain(fwChain(p, FirewallIsolationChain))
		t.conn().DelChain(fwChain(p, FirewallIsolationChain))
	}
	if err := t.commit(); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("delete the older firewall rules in %s %s: %w", familyName(p), p.table.Name, err)
	}
	return nil
}
