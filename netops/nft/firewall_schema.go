package nft

import (
	"fmt"
	"slices"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/google/nftables/userdata"
	"github.com/google/nftables/xt"
	mdnetlink "github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// The firewall's fixed rules:
//
//	table inet cnibox-firewall {
//		map pods4 { type ipv4_addr : mark; flags timeout }  # addr : hash(owner)
//		map isolated4, samebridge4 { the same }
//		map bridgeof4 { type ipv4_addr . ifname : mark; flags timeout }
//		(and the ip6 maps)
//		chain forward { type filter hook forward priority -5
//			meta nfproto ipv4 jump admin-jumps   # families without iptables' filter
//			jump CNI-ISOLATION
//			jump CNI-FORWARD }
//		chain admin-jumps { jump CNI-ADMIN ... }
//		chain CNI-ISOLATION {
//			ct status dnat return
//			ip daddr @isolated4 ct state new drop
//			ip daddr . iifname @bridgeof4 return
//			ip daddr @samebridge4 ct state new drop ... }
//		chain CNI-FORWARD {
//			ip daddr @pods4 ct state established,related accept
//			ip daddr @pods4 ct status dnat accept
//			ip saddr @pods4 accept ... }
//		chain clear { type filter hook forward priority 5 }
//	}
//
// In a family whose iptables' filter has FORWARD, "drop" is "meta mark set
// mark | 0x02000000 return", "accept" is "meta mark set mark | 0x01000000
// return", clear removes both bits, and iptables' filter holds:
//
//	-A FORWARD -j CNI-FORWARD            (first)
//	-A CNI-FORWARD -j CNI-ADMIN          (first)
//	-A CNI-FORWARD -m mark --mark 0x2000000/0x2000000 -j DROP
//	-A CNI-FORWARD -m mark --mark 0x1000000/0x1000000 -j ACCEPT
//
// The comments of forward's last two rules name the layout and the mode of
// each family: a check that finds them in place (one dump of forward, of
// admin-jumps, of iptables' FORWARD and CNI-FORWARD) writes nothing and
// takes no lock. Anything else is rewritten under the caller's lock.

const (
	fwAdminJumps  = "admin-jumps"
	fwPrioMark    = -5
	fwPrioClear   = 5
	fwLayout      = "cnibox-firewall 2"
	fwMarkComment = "cnibox-firewall: the marks of " + FirewallTable
	nftTypeMark   = 19
	nftTypeIfname = 41
)

// fwModes says, for ip and ip6, whether iptables' filter has FORWARD (the
// firewall then marks and iptables acts on the marks).
type fwModes [2]bool

// fwFamilies are ip and ip6 with their NFPROTO values.
var fwFamilies = [2]struct {
	name    string
	nfproto byte
	table   nftables.TableFamily
	v6      bool
}{
	{"ip", unix.NFPROTO_IPV4, nftables.TableFamilyIPv4, false},
	{"ip6", unix.NFPROTO_IPV6, nftables.TableFamilyIPv6, true},
}

func (h *Handle) fwModes() (fwModes, error) {
	var m fwModes
	for i, f := range fwFamilies {
		ok, err := h.nftChainExists(uint8(f.table), fwIptablesTable, fwIptablesForward)
		if err != nil {
			return m, fmt.Errorf("look for iptables' %s %s %s: %w", f.name, fwIptablesTable, fwIptablesForward, err)
		}
		m[i] = ok
	}
	return m, nil
}

// fwSchemaMissing returns what of the fixed rules is missing or stale for
// modes and admin ("" when all is in place).
func (h *Handle) fwSchemaMissing(m fwModes, admin string) (string, error) {
	own := fwPlace{table: &nftables.Table{Family: nftables.TableFamilyINet, Name: FirewallTable}, own: true}
	base, err := h.fwRules(own, fwOwnBaseChain)
	if err != nil {
		return "", err
	}
	var got []string
	for _, r := range base {
		got = append(got, ruleComment(r))
	}
	if want := fwBaseComments(m); !slices.Equal(got, want) {
		return fmt.Sprintf("inet %s chain %s has rules %q, want %q", FirewallTable, fwOwnBaseChain, got, want), nil
	}
	if !m[0] || !m[1] {
		jumps, err := h.fwRules(own, fwAdminJumps)
		if err != nil {
			return "", err
		}
		if fwFindJump(jumps, admin) < 0 {
			return fmt.Sprintf("inet %s chain %s has no jump to %s", FirewallTable, fwAdminJumps, admin), nil
		}
	}
	for i, f := range fwFamilies {
		if !m[i] {
			continue
		}
		p := fwPlace{table: &nftables.Table{Family: f.table, Name: fwIptablesTable}}
		fwd, err := h.fwRules(p, fwIptablesForward)
		if err != nil {
			return "", err
		}
		if len(fwd) == 0 || fwFindJump(fwd[:1], FirewallForwardChain) < 0 {
			return fmt.Sprintf("%s filter chain FORWARD does not jump to %s first", f.name, FirewallForwardChain), nil
		}
		cf, err := h.fwRules(p, FirewallForwardChain)
		if err != nil {
			return "", err
		}
		if fwFindJump(cf, admin) < 0 {
			return fmt.Sprintf("%s filter chain %s has no jump to %s", f.name, FirewallForwardChain, admin), nil
		}
		if !hasComment(cf, fwMarkComment+" drop") || !hasComment(cf, fwMarkComment+" pass") {
			return fmt.Sprintf("%s filter chain %s lacks the rules of the marks", f.name, FirewallForwardChain), nil
		}
	}
	return "", nil
}

// fwCheckSchema is CHECK's: the fixed rules in place, as an error wrapping
// ErrNotFound.
func (h *Handle) fwCheckSchema(admin string) error {
	_, miss, err := h.fwMissing(admin)
	if err != nil || miss == "" {
		return err
	}
	return fmt.Errorf("%s: %w", miss, ErrNotFound)
}

// fwMissing is fwSchemaMissing for the families' modes now.
func (h *Handle) fwMissing(admin string) (fwModes, string, error) {
	m, err := h.fwModes()
	if err != nil {
		return m, "", err
	}
	miss, err := h.fwSchemaMissing(m, admin)
	return m, miss, err
}

// takeLock calls lock (when not nil) and returns its release.
func takeLock(lock func() (func(), error)) (func(), error) {
	if lock == nil {
		return func() {}, nil
	}
	return lock()
}

// fwEnsureSchema puts the fixed rules in place for admin; when something
// is missing it takes lock (may be nil) and writes it.
func (h *Handle) fwEnsureSchema(admin string, lock func() (func(), error)) error {
	m, miss, err := h.fwMissing(admin)
	if err != nil || miss == "" {
		return err
	}
	unlock, err := takeLock(lock)
	if err != nil {
		return err
	}
	defer unlock()
	if miss, err = h.fwSchemaMissing(m, admin); err != nil || miss == "" {
		return err
	}
	if err := h.commitRaw(fwTableMsgs()...); err != nil {
		return fmt.Errorf("make table inet %s: %w", FirewallTable, err)
	}
	if err := h.fwWriteOwn(m, admin); err != nil {
		return err
	}
	for i, f := range fwFamilies {
		if m[i] {
			if err := h.fwWriteIptables(fwPlace{table: &nftables.Table{Family: f.table, Name: fwIptablesTable}}, admin); err != nil {
				return err
			}
		}
	}
	return nil
}

// fwBaseComments are the comments of the rules of chain forward: the jumps
// to admin-jumps of the families without iptables' filter, then the jumps
// to CNI-ISOLATION and CNI-FORWARD, whose comments name the layout and the
// mode of each family.
func fwBaseComments(m fwModes) []string {
	var out []string
	mode := fwLayout
	for i, f := range fwFamilies {
		mode += " " + f.name + ":" + map[bool]string{true: "iptables-marks", false: "own"}[m[i]]
		if !m[i] {
			out = append(out, fwJumpComment)
		}
	}
	return append(out, mode+": ingressPolicy", mode+": pods")
}

// fwTableMsgs creates the table and its maps (each message idempotent;
// the chains are fwOwnTable's).
func fwTableMsgs() []mdnetlink.Message {
	const create = mdnetlink.Acknowledge | mdnetlink.Create
	msgs := []mdnetlink.Message{pmMsg(unix.NFT_MSG_NEWTABLE, create, attrs(mdnetlink.Attribute{Type: unix.NFTA_TABLE_NAME, Data: cstr(FirewallTable)}))}
	for i, s := range fwMapList() {
		msgs = append(msgs, pmMsg(unix.NFT_MSG_NEWSET, create, attrs(
			mdnetlink.Attribute{Type: unix.NFTA_SET_TABLE, Data: cstr(FirewallTable)},
			mdnetlink.Attribute{Type: unix.NFTA_SET_NAME, Data: cstr(s.name)},
			mdnetlink.Attribute{Type: unix.NFTA_SET_FLAGS, Data: be32(nftSetMap | nftSetTimeout)},
			mdnetlink.Attribute{Type: unix.NFTA_SET_KEY_TYPE, Data: be32(s.keyType)},
			mdnetlink.Attribute{Type: unix.NFTA_SET_KEY_LEN, Data: be32(s.keyLen)},
			mdnetlink.Attribute{Type: unix.NFTA_SET_DATA_TYPE, Data: be32(nftTypeMark)},
			mdnetlink.Attribute{Type: unix.NFTA_SET_DATA_LEN, Data: be32(4)},
			mdnetlink.Attribute{Type: unix.NFTA_SET_ID, Data: be32(uint32(0x100 + i))},
		)))
	}
	return msgs
}

// fwWriteOwn reconciles the chains of the own table for m (fwOwnTable).
func (h *Handle) fwWriteOwn(m fwModes, admin string) error {
	if _, err := h.reconcile(fwOwnTable(m, admin)); err != nil {
		return fmt.Errorf("write the chains of inet %s: %w", FirewallTable, err)
	}
	return nil
}

// fwOwnTable is the firewall's own table for modes m: its fixed chains and,
// when a family needs it, the admin chain (the operators': made when
// missing, never flushed) with a jump to it from admin-jumps. The maps,
// whose elements are the pods', are fwTableMsgs'.
func fwOwnTable(m fwModes, admin string) *tableSpec {
	var base, clear, iso, fwd []*nftables.Rule
	rule := func(chain *[]*nftables.Rule, comment string, ex ...expr.Any) {
		*chain = append(*chain, &nftables.Rule{Exprs: ex, UserData: userdata.AppendString(nil, userdata.TypeComment, comment)})
	}
	cm := fwBaseComments(m)
	cm = cm[len(cm)-2:]
	for i, f := range fwFamilies {
		if !m[i] {
			rule(&base, fwJumpComment, slices.Concat(nfMatch(f.nfproto), jump(fwAdminJumps))...)
		}
	}
	rule(&base, cm[0], jump(FirewallIsolationChain)...)
	rule(&base, cm[1], jump(FirewallForwardChain)...)
	rule(&iso, fwDNATComment, append(ctStatusDNAT(), &expr.Verdict{Kind: expr.VerdictReturn})...)
	for i, f := range fwFamilies {
		drop := []expr.Any{&expr.Counter{}, &expr.Verdict{Kind: expr.VerdictDrop}}
		pass := []expr.Any{&expr.Counter{}, &expr.Verdict{Kind: expr.VerdictAccept}}
		if m[i] {
			drop, pass = markOr(FirewallMarkDrop), markOr(FirewallMarkPass)
			rule(&clear, f.name+": clear the marks", slices.Concat(nfMatch(f.nfproto), markClear())...)
		}
		nf, dst, src := nfMatch(f.nfproto), addrTo(f.v6, false, reg1), addrTo(f.v6, true, reg1)
		rule(&iso, f.name+": new connections to isolated pods",
			slices.Concat(nf, dst, mapHas(fwMapName("isolated", f.v6)), ctState(expr.CtStateBitNEW), drop)...)
		rule(&iso, f.name+": connections from a same-bridge pod's bridge pass",
			slices.Concat(nf, dst, iifnameAfterAddr(f.v6), mapHas(fwMapName("bridgeof", f.v6)), []expr.Any{&expr.Verdict{Kind: expr.VerdictReturn}})...)
		rule(&iso, f.name+": new connections to same-bridge pods from elsewhere",
			slices.Concat(nf, dst, mapHas(fwMapName("samebridge", f.v6)), ctState(expr.CtStateBitNEW), drop)...)
		pods := mapHas(fwMapName("pods", f.v6))
		rule(&fwd, f.name+": replies to pods",
			slices.Concat(nf, dst, pods, ctState(expr.CtStateBitESTABLISHED|expr.CtStateBitRELATED), pass)...)
		rule(&fwd, f.name+": port-forwarded connections to pods",
			slices.Concat(nf, dst, pods, ctStatusDNAT(), pass)...)
		rule(&fwd, f.name+": from pods", slices.Concat(nf, src, pods, pass)...)
	}
	s := &tableSpec{table: &nftables.Table{Family: nftables.TableFamilyINet, Name: FirewallTable}, what: "the firewall's table",
		chains: []chainSpec{
			{name: fwAdminJumps, appendOnly: true},
			{name: FirewallIsolationChain, rules: iso},
			{name: FirewallForwardChain, rules: fwd},
			baseChain(fwOwnBaseChain, nftables.ChainTypeFilter, *nftables.ChainHookForward, fwPrioMark, base),
			baseChain(fwClearChain, nftables.ChainTypeFilter, *nftables.ChainHookForward, fwPrioClear, clear),
		}}
	if !m[0] || !m[1] {
		var jumps []*nftables.Rule
		rule(&jumps, fwJumpComment, jump(admin)...)
		s.chains = append(s.chains, chainSpec{name: admin, appendOnly: true},
			chainSpec{name: fwAdminJumps, appendOnly: true, rules: jumps,
				same: func(have, _ *nftables.Rule) bool { return fwFindJump([]*nftables.Rule{have}, admin) == 0 }})
		s.chains = slices.Delete(s.chains, 0, 1) // admin-jumps once, with its jump
	}
	return s
}

// fwWriteIptables makes, in iptables' filter of p's family, the chains
// CNI-FORWARD and admin, the jump from FORWARD to CNI-FORWARD first (once:
// repeated ones go), the jump to admin first in CNI-FORWARD and the rules
// of the marks after the leading jumps.
func (h *Handle) fwWriteIptables(p fwPlace, admin string) error {
	t := h.tx()
	c := t.conn()
	c.AddChain(fwChain(p, FirewallForwardChain))
	c.AddChain(fwChain(p, admin))
	if err := t.commit(); err != nil {
		return fmt.Errorf("make the firewall chains in %s filter: %w", familyName(p), err)
	}
	fwd, err := h.fwRules(p, fwIptablesForward)
	if err != nil {
		return err
	}
	cf, err := h.fwRules(p, FirewallForwardChain)
	if err != nil {
		return err
	}
	// One jump to CNI-FORWARD, first: a missing or later one is inserted
	// at the head, and the others go.
	first := fwFindJump(fwd, FirewallForwardChain)
	if first != 0 {
		c.InsertRule(fwJumpRule(p, fwIptablesForward, FirewallForwardChain))
	}
	for i, r := range fwd {
		if (i > 0 || first != 0) && fwFindJump([]*nftables.Rule{r}, FirewallForwardChain) == 0 {
			if err := c.DelRule(r); err != nil {
				return err
			}
		}
	}
	// The rules of the marks go after the leading jumps (admin, and the
	// older layout's CNI-ISOLATION); the admin jump, when missing, first.
	var after uint64
	for _, r := range cf {
		if ruleComment(r) != fwJumpComment {
			break
		}
		after = r.Handle
	}
	for _, mk := range []struct {
		bit     uint32
		verdict expr.VerdictKind
		what    string
	}{{FirewallMarkPass, expr.VerdictAccept, "pass"}, {FirewallMarkDrop, expr.VerdictDrop, "drop"}} {
		if hasComment(cf, fwMarkComment+" "+mk.what) {
			continue
		}
		r := &nftables.Rule{Table: p.table, Chain: fwChain(p, FirewallForwardChain),
			Exprs:    append(markIs(mk.bit), &expr.Counter{}, &expr.Verdict{Kind: mk.verdict}),
			UserData: userdata.AppendString(nil, userdata.TypeComment, fwMarkComment+" "+mk.what)}
		// Pass first, then drop in front of it: drop ends up before pass.
		if after != 0 {
			r.Position = after
			c.AddRule(r)
		} else {
			c.InsertRule(r)
		}
	}
	if fwFindJump(cf, admin) < 0 {
		c.InsertRule(fwJumpRule(p, FirewallForwardChain, admin))
	}
	if err := t.commit(); err != nil {
		return fmt.Errorf("write the firewall jumps in %s filter: %w", familyName(p), err)
	}
	return nil
}

// fwJumpRule is `-j to` in chain from, with the reference's comment.
func fwJumpRule(p fwPlace, from, to string) *nftables.Rule {
	return &nftables.Rule{
		Table:    p.table,
		Chain:    fwChain(p, from),
		Exprs:    jump(to),
		UserData: userdata.AppendString(nil, userdata.TypeComment, fwJumpComment),
	}
}

// jump is `counter jump to`.
func jump(to string) []expr.Any {
	return []expr.Any{&expr.Counter{}, &expr.Verdict{Kind: expr.VerdictJump, Chain: to}}
}

// ruleComment returns a rule's comment: its user data, as nft and cnibox
// write it, or an xt comment match, as iptables-nft writes `-m comment`.
func ruleComment(r *nftables.Rule) string {
	if s, ok := userdata.GetString(r.UserData, userdata.TypeComment); ok {
		return s
	}
	for _, e := range r.Exprs {
		if m, ok := e.(*expr.Match); ok && m.Name == "comment" {
			if c, ok := m.Info.(*xt.Comment); ok {
				return string(*c)
			}
		}
	}
	return ""
}

func hasComment(rules []*nftables.Rule, c string) bool {
	return slices.ContainsFunc(rules, func(r *nftables.Rule) bool { return ruleComment(r) == c })
}
