package netops

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/google/nftables/userdata"
	"golang.org/x/sys/unix"
)

// The firewall role's rules: the pod's addresses let through the node's
// forward path. For each family (ip, ip6) the rules go into iptables-nft's
// table "filter" when it has a chain FORWARD (a DROP policy or rule there
// cannot be undone from another table: every base chain on a hook is
// evaluated and any one's drop is final), else into cnibox's own table
// "cnibox-firewall" of that family, whose base chain on the forward hook
// jumps to the same chains. Every expression is one iptables-nft can list
// (payload + cmp, meta iifname/oifname, ct state, immediate verdicts), and
// each rule of an attachment carries a comment (iptables' -m comment) naming
// its owner, so DEL and GC find them without a record.

const (
	// FirewallTable is cnibox's own table (families ip and ip6) used when
	// iptables-nft's filter table is not there.
	FirewallTable = "cnibox-firewall"
	// FirewallForwardChain holds the per-pod accepts.
	FirewallForwardChain = "CNI-FORWARD"
	// FirewallIsolationChain holds the ingressPolicy drops, evaluated after
	// the admin chain and before the accepts.
	FirewallIsolationChain = "CNI-ISOLATION"
	fwIptablesTable        = "filter"
	fwIptablesForward      = "FORWARD"
	fwOwnBaseChain         = "forward"
	fwJumpComment          = "CNI firewall plugin rules"
	fwDNATComment          = "cnibox: port-forwarded connections pass"
)

// Ingress policies of FirewallRules.
const (
	IngressOpen       = "open"
	IngressSameBridge = "same-bridge"
	IngressIsolated   = "isolated"
)

// FirewallRules is what one attachment asks of the forward path.
type FirewallRules struct {
	// AdminChain is the operators' chain (CNI-ADMIN), jumped to first.
	AdminChain string
	// Owner is the comment on every rule of the attachment.
	Owner string
	// Addrs are the pod's addresses.
	Addrs []netip.Addr
	// Bridge is the pod's bridge (for IngressSameBridge).
	Bridge string
	// Ingress is IngressOpen (or empty), IngressSameBridge or IngressIsolated.
	Ingress string
}

// fwPlace is where the rules of one family go.
type fwPlace struct {
	table *nftables.Table
	own   bool // cnibox's own table (else iptables-nft's filter)
}

// fwPlaces returns, for ip and ip6, the table the rules go in.
func (h *Handle) fwPlaces() ([]fwPlace, error) {
	if _, err := h.nftConn(); err != nil {
		return nil, err
	}
	var out []fwPlace
	for _, fam := range []nftables.TableFamily{nftables.TableFamilyIPv4, nftables.TableFamilyIPv6} {
		ipt, err := h.nftChainExists(uint8(fam), fwIptablesTable, fwIptablesForward)
		if err != nil {
			return nil, fmt.Errorf("look for iptables' %s %s in %s: %w", fwIptablesTable, fwIptablesForward, h.where(), err)
		}
		if ipt {
			out = append(out, fwPlace{table: &nftables.Table{Family: fam, Name: fwIptablesTable}})
		} else {
			out = append(out, fwPlace{table: &nftables.Table{Family: fam, Name: FirewallTable}, own: true})
		}
	}
	return out, nil
}

// fwAllPlaces returns every table the rules may be in: iptables-nft's
// filter and cnibox-firewall, of ip and ip6. DEL and ADD's replacing look
// in all four, so a pod's rules written before iptables' table appeared
// are found too.
func (h *Handle) fwAllPlaces() ([]fwPlace, error) {
	if _, err := h.nftConn(); err != nil {
		return nil, err
	}
	var out []fwPlace
	for _, fam := range []nftables.TableFamily{nftables.TableFamilyIPv4, nftables.TableFamilyIPv6} {
		out = append(out, fwPlace{table: &nftables.Table{Family: fam, Name: fwIptablesTable}},
			fwPlace{table: &nftables.Table{Family: fam, Name: FirewallTable}, own: true})
	}
	return out, nil
}

// is6 reports whether the place is of family ip6.
func (p fwPlace) is6() bool { return p.table.Family == nftables.TableFamilyIPv6 }

// EnsureFirewall lets r's addresses through the forward path (and applies
// its ingress policy), idempotently: the chains and jumps are made if
// missing, the owner's rules (wherever they are) are replaced. In the table
// in use this is one dump of each chain and one transaction, so the pod's
// old rules and its new ones are swapped atomically and the cost of an ADD
// grows with the rules on the node only through that dump. Callers that
// run concurrently must hold a lock across it (roles/firewall does): a dump
// that another change interrupts can skip rules.
func (h *Handle) EnsureFirewall(r FirewallRules) error {
	places, err := h.fwPlaces()
	if err != nil {
		return err
	}
	all, err := h.fwAllPlaces()
	if err != nil {
		return err
	}
	mine := func(o string) bool { return o == r.Owner }
	for _, p := range all {
		if !slices.ContainsFunc(places, func(q fwPlace) bool { return q.table.Family == p.table.Family && q.table.Name == p.table.Name }) {
			// Written before iptables' table appeared (or went).
			if err := h.fwDeleteOwned(p, mine); err != nil {
				return err
			}
		}
	}
	c := h.nft
	for _, p := range places {
		fwd, iso, err := h.fwSchema(p, r.AdminChain)
		if err != nil {
			return err
		}
		for _, rule := range append(fwd, iso...) {
			if o := fwOwner(rule); o != "" && mine(o) {
				if err := c.DelRule(rule); err != nil {
					return err
				}
			}
		}
		for _, rule := range fwPodRules(p, r) {
			c.AddRule(rule)
		}
		if r.Ingress == IngressSameBridge || r.Ingress == IngressIsolated {
			h.fwAddIsolation(p, r, iso)
		}
		if err := c.Flush(); err != nil {
			return fmt.Errorf("add the firewall rules of %s in %s %s of %s: %w", r.Owner, familyName(p), p.table.Name, h.where(), err)
		}
	}
	return nil
}

// DeleteFirewall removes the rules whose owner comment del reports true
// for, in every place. Missing tables
// and chains are fine.
func (h *Handle) DeleteFirewall(del func(owner string) bool) error {
	places, err := h.fwAllPlaces()
	if err != nil {
		return err
	}
	var errs []error
	for _, p := range places {
		errs = append(errs, h.fwDeleteOwned(p, del))
	}
	return errors.Join(errs...)
}

// CheckFirewall reports (as an error wrapping ErrNotFound) what of r is
// missing: the jumps, the admin chain, a rule for each address.
func (h *Handle) CheckFirewall(r FirewallRules) error {
	places, err := h.fwPlaces()
	if err != nil {
		return err
	}
	for _, p := range places {
		want := fwPodRules(p, r)
		if len(want) == 0 {
			continue
		}
		base, baseChain := p.table.Name, fwIptablesForward
		if p.own {
			baseChain = fwOwnBaseChain
		}
		rules, err := h.fwRules(p, baseChain)
		if err != nil {
			return err
		}
		if fwFindJump(rules, FirewallForwardChain) < 0 {
			return fmt.Errorf("%s %s chain %s has no jump to %s: %w", familyName(p), base, baseChain, FirewallForwardChain, ErrNotFound)
		}
		have, err := h.fwRules(p, FirewallForwardChain)
		if err != nil {
			return err
		}
		if fwFindJump(have, r.AdminChain) < 0 {
			return fmt.Errorf("%s %s chain %s has no jump to %s: %w", familyName(p), base, FirewallForwardChain, r.AdminChain, ErrNotFound)
		}
		for _, w := range want {
			if !fwHasRule(have, w) {
				return fmt.Errorf("%s %s chain %s lacks the rule of %s for %s: %w", familyName(p), base, FirewallForwardChain, r.Owner, fwRuleAddr(w), ErrNotFound)
			}
		}
	}
	return nil
}

func familyName(p fwPlace) string {
	if p.is6() {
		return "ip6"
	}
	return "ip"
}

// fwChain names a chain of p's table.
func fwChain(p fwPlace, name string) *nftables.Chain {
	return &nftables.Chain{Name: name, Table: p.table}
}

// fwSchema makes, when missing, the own table and its base chain, the
// chains CNI-FORWARD, CNI-ISOLATION and the admin chain, and queues (for
// the caller's Flush) the jump from the base chain to CNI-FORWARD (first)
// and, at the head of CNI-FORWARD, the jumps to the admin chain and then
// CNI-ISOLATION, and the deletion of repeated jumps (two first ADDs of an
// older cnibox, without the lock, could both insert one). It returns the
// rules of CNI-FORWARD and CNI-ISOLATION as it found them.
func (h *Handle) fwSchema(p fwPlace, admin string) (fwd, iso []*nftables.Rule, err error) {
	c := h.nft
	baseChain := fwIptablesForward
	if p.own {
		c.AddTable(p.table)
		addBaseChain(c, p.table, fwOwnBaseChain, nftables.ChainTypeFilter, nftables.ChainHookForward, nftables.ChainPriorityFilter)
		baseChain = fwOwnBaseChain
	}
	for _, n := range []string{FirewallForwardChain, FirewallIsolationChain, admin} {
		c.AddChain(fwChain(p, n))
	}
	if err := c.Flush(); err != nil {
		return nil, nil, fmt.Errorf("make the firewall chains in %s %s of %s: %w", familyName(p), p.table.Name, h.where(), err)
	}
	base, err := h.fwRules(p, baseChain)
	if err != nil {
		return nil, nil, err
	}
	if fwd, err = h.fwRules(p, FirewallForwardChain); err != nil {
		return nil, nil, err
	}
	if iso, err = h.fwRules(p, FirewallIsolationChain); err != nil {
		return nil, nil, err
	}
	// The isolation jump is inserted first, so that the admin jump, inserted
	// after it, ends up in front of it.
	for _, j := range []struct {
		rules    []*nftables.Rule
		from, to string
	}{{base, baseChain, FirewallForwardChain}, {fwd, FirewallForwardChain, FirewallIsolationChain}, {fwd, FirewallForwardChain, admin}} {
		first := fwFindJump(j.rules, j.to)
		if first < 0 {
			c.InsertRule(fwJumpRule(p, j.from, j.to))
			continue
		}
		for _, r := range j.rules[first+1:] {
			if fwFindJump([]*nftables.Rule{r}, j.to) == 0 && fwOwner(r) == "" {
				if err := c.DelRule(r); err != nil {
					return nil, nil, err
				}
			}
		}
	}
	return fwd, iso, nil
}

// fwJumpRule is `-j to` in chain from, with the reference's comment.
func fwJumpRule(p fwPlace, from, to string) *nftables.Rule {
	return &nftables.Rule{
		Table:    p.table,
		Chain:    fwChain(p, from),
		Exprs:    []expr.Any{&expr.Counter{}, &expr.Verdict{Kind: expr.VerdictJump, Chain: to}},
		UserData: userdata.AppendString(nil, userdata.TypeComment, fwJumpComment),
	}
}

// fwRules lists the rules of a chain of p; a missing table or chain has
// none.
func (h *Handle) fwRules(p fwPlace, chain string) ([]*nftables.Rule, error) {
	rules, err := h.nft.GetRules(p.table, fwChain(p, chain))
	if errors.Is(err, unix.ENOENT) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list %s %s chain %s in %s: %w", familyName(p), p.table.Name, chain, h.where(), err)
	}
	return rules, nil
}

// fwFindJump returns the index of the first rule jumping to chain, or -1.
func fwFindJump(rules []*nftables.Rule, chain string) int {
	for i, r := range rules {
		for _, e := range r.Exprs {
			if v, ok := e.(*expr.Verdict); ok && v.Kind == expr.VerdictJump && v.Chain == chain {
				return i
			}
		}
	}
	return -1
}

// fwOwner returns a rule's comment when it is an owner's (not the jumps').
func fwOwner(r *nftables.Rule) string {
	s, ok := userdata.GetString(r.UserData, userdata.TypeComment)
	if !ok || s == fwJumpComment || s == fwDNATComment {
		return ""
	}
	return s
}

// fwDeleteOwned deletes the rules of CNI-FORWARD and CNI-ISOLATION whose
// owner del reports true.
func (h *Handle) fwDeleteOwned(p fwPlace, del func(string) bool) error {
	var rules []*nftables.Rule
	for _, chain := range []string{FirewallForwardChain, FirewallIsolationChain} {
		rs, err := h.fwRules(p, chain)
		if err != nil {
			return err
		}
		rules = append(rules, rs...)
	}
	n := 0
	for _, r := range rules {
		if o := fwOwner(r); o != "" && del(o) {
			if err := h.nft.DelRule(r); err != nil {
				return err
			}
			n++
		}
	}
	if n == 0 {
		return nil
	}
	if err := h.nft.Flush(); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("delete firewall rules in %s %s of %s: %w", familyName(p), p.table.Name, h.where(), err)
	}
	return nil
}

// fwPodRules are the rules of r in p (its addresses of p's family): replies
// and related traffic to the pod, port-forwarded connections to it
// (portmap's DNAT), anything from it.
func fwPodRules(p fwPlace, r FirewallRules) []*nftables.Rule {
	var out []*nftables.Rule
	ud := userdata.AppendString(nil, userdata.TypeComment, r.Owner)
	for _, a := range r.Addrs {
		if a.Is6() != p.is6() {
			continue
		}
		for _, st := range [][]expr.Any{fwCtState(expr.CtStateBitESTABLISHED | expr.CtStateBitRELATED), fwCtStatusDNAT()} {
			in := append(append(fwMatchAddr(a, false), st...), &expr.Counter{}, &expr.Verdict{Kind: expr.VerdictAccept})
			out = append(out, &nftables.Rule{Table: p.table, Chain: fwChain(p, FirewallForwardChain), Exprs: in, UserData: ud})
		}
		from := append(fwMatchAddr(a, true), &expr.Counter{}, &expr.Verdict{Kind: expr.VerdictAccept})
		out = append(out, &nftables.Rule{Table: p.table, Chain: fwChain(p, FirewallForwardChain), Exprs: from, UserData: ud})
	}
	return out
}

// fwAddIsolation queues r's ingressPolicy drops to CNI-ISOLATION, with
// r's owner comment, after one shared rule (made once) that returns for
// port-forwarded connections, which portmap opened on purpose. same-bridge:
// a new connection to a pod's address that came in by an interface other
// than its bridge is dropped. isolated: any new connection to it that
// passes the forward path is dropped. The pods' own connections and their
// replies pass, and the node reaches its pods by its output path, which
// this does not touch.
func (h *Handle) fwAddIsolation(p fwPlace, r FirewallRules, rules []*nftables.Rule) {
	add := func(comment string, v expr.VerdictKind, ex ...[]expr.Any) {
		var all []expr.Any
		for _, e := range ex {
			all = append(all, e...)
		}
		all = append(all, &expr.Counter{}, &expr.Verdict{Kind: v})
		ud := userdata.AppendString(nil, userdata.TypeComment, comment)
		h.nft.AddRule(&nftables.Rule{Table: p.table, Chain: fwChain(p, FirewallIsolationChain), Exprs: all, UserData: ud})
	}
	shared := false
	for _, rule := range rules {
		if s, _ := userdata.GetString(rule.UserData, userdata.TypeComment); s == fwDNATComment {
			shared = true
		}
	}
	if !shared {
		add(fwDNATComment, expr.VerdictReturn, fwCtStatusDNAT())
	}
	for _, a := range r.Addrs {
		if a.Is6() != p.is6() {
			continue
		}
		if r.Ingress == IngressIsolated {
			add(r.Owner, expr.VerdictDrop, fwMatchAddr(a, false), fwCtState(expr.CtStateBitNEW))
		} else {
			add(r.Owner, expr.VerdictDrop, fwMatchAddr(a, false), fwMatchIf(r.Bridge, true, true), fwCtState(expr.CtStateBitNEW))
		}
	}
}
