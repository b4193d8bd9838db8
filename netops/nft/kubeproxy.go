package nft

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/google/nftables"
	mdnetlink "github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// kube-proxy's leftovers, removed as `kube-proxy --cleanup` removes them
// (kubernetes v1.34 pkg/proxy/nftables and pkg/proxy/iptables
// CleanupLeftovers), for moving a node from kube-proxy to cnibox-agent's
// Services proxy (docs/deploy.md). kube-proxy leaves its rules in place
// when it stops, so they keep serving until someone removes them:
//
//   - its nftables mode: tables ip kube-proxy and ip6 kube-proxy, whole;
//   - its iptables mode through iptables-nft (tables filter, nat and mangle
//     of families ip and ip6): in nat the chains KUBE-SERVICES,
//     KUBE-NODEPORTS, KUBE-POSTROUTING, KUBE-MARK-MASQ, KUBE-PROXY-CANARY
//     and every KUBE-SVC-, KUBE-SVL-, KUBE-EXT-, KUBE-FW-, KUBE-SEP- chain;
//     in filter KUBE-SERVICES, KUBE-EXTERNAL-SERVICES, KUBE-FORWARD,
//     KUBE-NODEPORTS, KUBE-PROXY-FIREWALL, KUBE-PROXY-CANARY; in mangle
//     KUBE-PROXY-CANARY; and the rules of other chains that jump to them
//     (kube-proxy's jumps from INPUT, FORWARD, OUTPUT, PREROUTING and
//     POSTROUTING). The kubelet's chains (KUBE-FIREWALL,
//     KUBE-KUBELET-CANARY) stay, as kube-proxy leaves them.
//
// Not seen: iptables-legacy's tables (not nftables') and the IPVS mode's
// virtual servers, ipsets and kube-ipvs0 device: `kube-proxy --cleanup`
// removes those.

// kubeProxyTable is kube-proxy's nftables table (families ip and ip6).
const kubeProxyTable = "kube-proxy"

// kubeProxyTables are iptables-nft's tables that hold kube-proxy's
// chains (kubeProxyChains).
var kubeProxyTables = [...]string{"filter", "mangle", "nat"}

// kubeProxyChains are kube-proxy's chains of iptables-nft's table: names,
// and name prefixes (ending in '-').
func kubeProxyChains(table string) []string {
	switch table {
	case "nat":
		return []string{"KUBE-SERVICES", "KUBE-NODEPORTS", "KUBE-POSTROUTING", "KUBE-MARK-MASQ", "KUBE-PROXY-CANARY",
			"KUBE-SVC-", "KUBE-SVL-", "KUBE-EXT-", "KUBE-FW-", "KUBE-SEP-"}
	case "filter":
		return []string{"KUBE-SERVICES", "KUBE-EXTERNAL-SERVICES", "KUBE-FORWARD", "KUBE-NODEPORTS", "KUBE-PROXY-FIREWALL", "KUBE-PROXY-CANARY"}
	case "mangle":
		return []string{"KUBE-PROXY-CANARY"}
	}
	return nil
}

// isKubeProxyChain reports whether chain of iptables-nft's table is
// kube-proxy's.
func isKubeProxyChain(table, chain string) bool {
	for _, n := range kubeProxyChains(table) {
		if chain == n || strings.HasSuffix(n, "-") && strings.HasPrefix(chain, n) {
			return true
		}
	}
	return false
}

// KubeProxyLeftover is one object of kube-proxy's that CleanupKubeProxy
// removes: a whole table (Chain ""), a chain, or a rule (Handle) of
// another chain that jumps to one of kube-proxy's (Target).
type KubeProxyLeftover struct {
	Family string `json:"family"` // "ip" or "ip6"
	Table  string `json:"table"`
	Chain  string `json:"chain,omitempty"`
	Handle uint64 `json:"handle,omitempty"`
	Target string `json:"target,omitempty"`
}

// String names l as nft would: "table ip kube-proxy", "chain ip nat
// KUBE-SERVICES", "rule ip nat PREROUTING handle 4 (jump KUBE-SERVICES)".
func (l KubeProxyLeftover) String() string {
	switch {
	case l.Chain == "":
		return "table " + l.Family + " " + l.Table
	case l.Handle == 0:
		return "chain " + l.Family + " " + l.Table + " " + l.Chain
	}
	return fmt.Sprintf("rule %s %s %s handle %d (jump %s)", l.Family, l.Table, l.Chain, l.Handle, l.Target)
}

// kubeProxyFamilies are the families kube-proxy writes, with nft's names.
var kubeProxyFamilies = [...]struct {
	fam  nftables.TableFamily
	name string
}{{nftables.TableFamilyIPv4, "ip"}, {nftables.TableFamilyIPv6, "ip6"}}

// KubeProxyLeftovers lists what CleanupKubeProxy would remove in h's
// namespace, tables first, then by family, table and chain; none:
// kube-proxy left nothing here (or never ran).
func (h *Handle) KubeProxyLeftovers() ([]KubeProxyLeftover, error) {
	if _, err := h.nftConn(); err != nil {
		return nil, err
	}
	var out []KubeProxyLeftover
	for _, f := range kubeProxyFamilies {
		ok, err := h.nftTableExists(uint8(f.fam), kubeProxyTable)
		if err != nil {
			return nil, fmt.Errorf("look for kube-proxy's tables in %s: %w", h.where(), err)
		}
		if ok {
			out = append(out, KubeProxyLeftover{Family: f.name, Table: kubeProxyTable})
		}
	}
	for _, f := range kubeProxyFamilies {
		chains, err := consistently(h, func() ([]*nftables.Chain, error) { return h.nft.ListChainsOfTableFamily(f.fam) })
		if err != nil {
			return nil, fmt.Errorf("look for kube-proxy's chains in %s: %w", h.where(), err)
		}
		for _, table := range kubeProxyTables {
			var own []KubeProxyLeftover
			for _, ch := range chains {
				if ch.Table != nil && ch.Table.Name == table && isKubeProxyChain(table, ch.Name) {
					own = append(own, KubeProxyLeftover{Family: f.name, Table: table, Chain: ch.Name})
				}
			}
			if len(own) == 0 {
				continue
			}
			jumps, err := h.kubeProxyJumps(f.fam, f.name, table)
			if err != nil {
				return nil, fmt.Errorf("read the rules of table %s %s in %s: %w", f.name, table, h.where(), err)
			}
			slices.SortFunc(own, func(a, b KubeProxyLeftover) int { return strings.Compare(a.Chain, b.Chain) })
			out = append(append(out, jumps...), own...)
		}
	}
	return out, nil
}

// CleanupKubeProxy removes kube-proxy's leftovers in h's namespace (see
// above) in one transaction, as `kube-proxy --cleanup` does, and returns
// what it removed; none is no error (idempotent). A kube-proxy that
// still runs writes them again at its next sync: stop it first
// (docs/deploy.md). Established connections keep their NAT: conntrack
// holds it, and a NAT chain of any table (cnibox's services table) keeps
// the kernel's NAT hooks in place.
func (h *Handle) CleanupKubeProxy() ([]KubeProxyLeftover, error) {
	ls, err := h.KubeProxyLeftovers()
	if err != nil || len(ls) == 0 {
		return nil, err
	}
	// The jumps to kube-proxy's chains from other chains first, then
	// every chain of its flushed (their jumps to each other go with their
	// rules), then the chains: a chain goes only once nothing jumps to it.
	var rules, flush, chains []mdnetlink.Message
	for _, l := range ls {
		fam := familyOf(l.Family)
		switch {
		case l.Chain == "":
			chains = append(chains, famMsg(fam, unix.NFT_MSG_DELTABLE, attrs(mdnetlink.Attribute{Type: unix.NFTA_TABLE_NAME, Data: cstr(l.Table)})))
		case l.Handle != 0:
			rules = append(rules, famMsg(fam, unix.NFT_MSG_DELRULE, attrs(
				mdnetlink.Attribute{Type: unix.NFTA_RULE_TABLE, Data: cstr(l.Table)},
				mdnetlink.Attribute{Type: unix.NFTA_RULE_CHAIN, Data: cstr(l.Chain)},
				mdnetlink.Attribute{Type: unix.NFTA_RULE_HANDLE, Data: be64(l.Handle)})))
		default:
			tc := attrs(mdnetlink.Attribute{Type: unix.NFTA_RULE_TABLE, Data: cstr(l.Table)}, mdnetlink.Attribute{Type: unix.NFTA_RULE_CHAIN, Data: cstr(l.Chain)})
			flush = append(flush, famMsg(fam, unix.NFT_MSG_DELRULE, tc))
			chains = append(chains, famMsg(fam, unix.NFT_MSG_DELCHAIN, attrs(
				mdnetlink.Attribute{Type: unix.NFTA_CHAIN_TABLE, Data: cstr(l.Table)},
				mdnetlink.Attribute{Type: unix.NFTA_CHAIN_NAME, Data: cstr(l.Chain)})))
		}
	}
	if err := h.commitRaw(append(append(rules, flush...), chains...)...); err != nil {
		if errors.Is(err, unix.EBUSY) || errors.Is(err, unix.ENOENT) {
			err = fmt.Errorf("%w (another program changed them meanwhile: is kube-proxy still running? stop it first, docs/deploy.md)", err)
		}
		return nil, fmt.Errorf("remove kube-proxy's leftovers in %s: %w", h.where(), classify(err))
	}
	return ls, nil
}

// kubeProxyJumps lists the rules of iptables-nft's table (of family fam,
// named famName) in chains not kube-proxy's that jump or go to one of
// kube-proxy's chains. The rules are read with one dump of the table and
// only their verdicts are decoded: iptables-nft's rules hold xtables
// matches that the nftables package need not understand.
func (h *Handle) kubeProxyJumps(fam nftables.TableFamily, famName, table string) ([]KubeProxyLeftover, error) {
	m := famMsg(fam, unix.NFT_MSG_GETRULE, attrs(mdnetlink.Attribute{Type: unix.NFTA_RULE_TABLE, Data: cstr(table)}))
	m.Header.Flags |= mdnetlink.Dump
	msgs, err := h.dump(m)
	if errors.Is(err, unix.ENOENT) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []KubeProxyLeftover
	for _, m := range msgs {
		r, err := ruleVerdicts(m.Data)
		if err != nil {
			return nil, err
		}
		if r.table != table || isKubeProxyChain(table, r.chain) {
			continue
		}
		for _, to := range r.targets {
			if isKubeProxyChain(table, to) {
				out = append(out, KubeProxyLeftover{Family: famName, Table: table, Chain: r.chain, Handle: r.handle, Target: to})
				break // (one delete of the rule)
			}
		}
	}
	return out, nil
}

// ruleJumps is what ruleVerdicts reads of a rule.
type ruleJumps struct {
	table, chain string
	handle       uint64
	targets      []string // the chains its jumps and gotos name
}

// ruleVerdicts decodes one NFT_MSG_NEWRULE (b: after the netlink header)
// down to its immediate verdicts' chains, skipping every other
// expression.
func ruleVerdicts(b []byte) (ruleJumps, error) {
	var r ruleJumps
	if len(b) < 4 {
		return r, nil
	}
	as, err := mdnetlink.UnmarshalAttributes(b[4:])
	if err != nil {
		return r, err
	}
	for _, a := range as {
		switch a.Type &^ unix.NLA_F_NESTED {
		case unix.NFTA_RULE_TABLE:
			r.table = cstring(a.Data)
		case unix.NFTA_RULE_CHAIN:
			r.chain = cstring(a.Data)
		case unix.NFTA_RULE_HANDLE:
			if len(a.Data) == 8 {
				r.handle = binary.BigEndian.Uint64(a.Data)
			}
		case unix.NFTA_RULE_EXPRESSIONS:
			elems, err := mdnetlink.UnmarshalAttributes(a.Data)
			if err != nil {
				return r, err
			}
			for _, el := range elems {
				if to := immediateChain(el.Data); to != "" {
					r.targets = append(r.targets, to)
				}
			}
		}
	}
	return r, nil
}

// immediateChain is the chain an expression (NFTA_EXPR_*) jumps or goes to
// when it is an immediate verdict that does; "" otherwise.
func immediateChain(b []byte) string {
	as, err := mdnetlink.UnmarshalAttributes(b)
	if err != nil {
		return ""
	}
	var name string
	var data []byte
	for _, a := range as {
		switch a.Type &^ unix.NLA_F_NESTED {
		case unix.NFTA_EXPR_NAME:
			name = cstring(a.Data)
		case unix.NFTA_EXPR_DATA:
			data = a.Data
		}
	}
	if name != "immediate" {
		return ""
	}
	v := attrOf(attrOf(data, unix.NFTA_IMMEDIATE_DATA), unix.NFTA_DATA_VERDICT)
	code, chain := attrOf(v, unix.NFTA_VERDICT_CODE), attrOf(v, unix.NFTA_VERDICT_CHAIN)
	if len(code) != 4 || chain == nil {
		return ""
	}
	if c := int32(binary.BigEndian.Uint32(code)); c != unix.NFT_JUMP && c != unix.NFT_GOTO {
		return ""
	}
	return cstring(chain)
}

// attrOf is the data of the first attribute of type typ in b (nil: none).
func attrOf(b []byte, typ uint16) []byte {
	as, err := mdnetlink.UnmarshalAttributes(b)
	if err != nil {
		return nil
	}
	for _, a := range as {
		if a.Type&^unix.NLA_F_NESTED == typ {
			return a.Data
		}
	}
	return nil
}

// cstring is a NUL-terminated netlink string.
func cstring(b []byte) string { return strings.TrimRight(string(b), "\x00") }

// be64 is v in network byte order.
func be64(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }

// famMsg is a request of msgType for family fam, with the ack flag.
func famMsg(fam nftables.TableFamily, msgType int, data []byte) mdnetlink.Message {
	m := pmMsg(msgType, mdnetlink.Acknowledge, data)
	m.Data[0] = byte(fam)
	return m
}

// familyOf is the family nft calls name ("ip" or "ip6").
func familyOf(name string) nftables.TableFamily {
	if name == "ip6" {
		return nftables.TableFamilyIPv6
	}
	return nftables.TableFamilyIPv4
}
