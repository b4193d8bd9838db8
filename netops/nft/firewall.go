package nft

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"net/netip"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// The firewall role's rules: the pod's addresses let through the node's
// forward path, and its ingressPolicy. A pod is elements of maps keyed by
// its address in cnibox's table "inet cnibox-firewall" (pods4/pods6, and
// isolated*, samebridge* and bridgeof* for the policies), each element's
// data a hash of its owner (the attachment) and its comment the owner: an
// ADD or DEL is a few single-element messages whatever the number of pods,
// no dump of the pods' rules and no lock. The table's rules are fixed; only
// their verdicts depend on where the forward path can be opened:
//
//   - where iptables-nft's table "filter" of the family has a chain FORWARD
//     (a DROP policy or rule there is final: no other table can undo it), the
//     table's chains mark the packets (fwMarkPass, fwMarkDrop) before
//     iptables' filter runs, and three rules in iptables' own FORWARD path,
//     which iptables lists, act on the marks: FORWARD jumps to CNI-FORWARD,
//     which jumps to the admin chain first, then drops fwMarkDrop and accepts
//     fwMarkPass; a base chain after filter clears the two bits again;
//   - else the table's chains drop and accept themselves, after a jump to the
//     admin chain in the same table.
//
// firewall_schema.go writes the table and iptables' rules, firewall_elem.go
// the elements, firewall_legacy.go removes the rules of the older layout (a
// rule per pod in CNI-FORWARD, found by its owner comment) that pods added
// by an older cnibox still have.

const (
	// FirewallTable is cnibox's table of the firewall (family inet; the older
	// layout had tables ip and ip6 of this name).
	FirewallTable = "cnibox-firewall"
	// FirewallForwardChain accepts (or marks) the pods' traffic.
	FirewallForwardChain = "CNI-FORWARD"
	// FirewallIsolationChain drops (or marks) new connections the
	// ingressPolicy refuses; it runs after the admin chain and before
	// FirewallForwardChain.
	FirewallIsolationChain = "CNI-ISOLATION"
	// FirewallMarkPass and FirewallMarkDrop are the packet mark bits the
	// firewall sets before iptables' filter table and clears after it
	// (only where iptables' filter FORWARD exists).
	FirewallMarkPass = 0x01000000
	FirewallMarkDrop = 0x02000000

	fwIptablesTable   = "filter"
	fwIptablesForward = "FORWARD"
	fwOwnBaseChain    = "forward"
	fwClearChain      = "clear"
	fwJumpComment     = "CNI firewall plugin rules"
	fwDNATComment     = "cnibox: port-forwarded connections pass"
	fwOwnerPrefix     = "cnibox/"
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
	// Owner names the attachment: the comment of its elements, hashed in
	// their data. It begins with "cnibox/".
	Owner string
	// Addrs are the pod's addresses.
	Addrs []netip.Addr
	// Bridge is the pod's bridge (IngressSameBridge needs it; DEL uses it to
	// find the pod's element in bridgeof*).
	Bridge string
	// Ingress is IngressOpen (or empty), IngressSameBridge or IngressIsolated.
	Ingress string
	// Lock, when not nil, takes the node's firewall lock (and returns its
	// release) for the rare changes that read a chain and then write it:
	// making the fixed rules, removing the older layout's rules.
	Lock func() (unlock func(), err error)
}

// fwPlace is a table of one family (ip or ip6) where forward rules go:
// iptables-nft's "filter" or a table of cnibox's own. The overlay's forward
// rules use the same places.
type fwPlace struct {
	table *nftables.Table
	own   bool // cnibox's own table (else iptables-nft's filter)
}

// fwPlaces returns, for ip and ip6, where forward rules must go: iptables'
// filter when it has a chain FORWARD, else the own table (the older
// layout's name; the overlay renames it).
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

// is6 reports whether the place is of family ip6.
func (p fwPlace) is6() bool { return p.table.Family == nftables.TableFamilyIPv6 }

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

// fwRules lists the rules of a chain of p; a missing table or chain has
// none.
func (h *Handle) fwRules(p fwPlace, chain string) ([]*nftables.Rule, error) {
	rules, err := consistently(h, func() ([]*nftables.Rule, error) { return h.nft.GetRules(p.table, fwChain(p, chain)) })
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

// fwOwnerData is the data of an owner's elements: 4 bytes of a hash of it,
// which the kernel compares when a removal re-adds the element (a key
// another attachment has taken since stays).
func fwOwnerData(owner string) []byte {
	h := sha256.Sum256([]byte(owner))
	return h[:4]
}

// EnsureFirewall lets r's addresses through the forward path and applies
// its ingress policy, idempotently: the table, iptables' jumps and the
// admin chain are made when missing (firewall_schema.go), then the
// elements of r's addresses are added in one transaction, replacing those
// another owner left at the same address; r's elements in the maps of
// other policies go. Pods added by an older cnibox keep their rules until
// their DEL (firewall_legacy.go).
func (h *Handle) EnsureFirewall(r FirewallRules) error {
	if _, err := h.nftConn(); err != nil {
		return err
	}
	if err := h.fwEnsureSchema(r.AdminChain, r.Lock); err != nil {
		return fmt.Errorf("firewall chains in %s: %w", h.where(), err)
	}
	if err := h.fwLegacyDelete(func(o string) bool { return o == r.Owner }, r.Lock); err != nil {
		return err
	}
	if err := h.fwAddElems(r); err != nil {
		return fmt.Errorf("add the firewall elements of %s in %s: %w", r.Owner, h.where(), err)
	}
	return nil
}

// DeleteFirewall removes r's elements (those of r.Addrs, in every map;
// with no Addrs, every element whose comment is r.Owner, found by listing
// the maps) and the owner's rules of the older layout. Elements another
// owner holds now, missing elements, maps and tables are fine. The
// nftables connection stays open until Close.
func (h *Handle) DeleteFirewall(r FirewallRules) error {
	if _, err := h.nftConn(); err != nil {
		return err
	}
	var errs []error
	if len(r.Addrs) == 0 {
		errs = append(errs, h.fwDeleteOwned(func(o string) bool { return o == r.Owner }))
	} else {
		errs = append(errs, h.fwDelElems(r))
	}
	errs = append(errs, h.fwLegacyDelete(func(o string) bool { return o == r.Owner }, r.Lock))
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("delete the firewall elements of %s in %s: %w", r.Owner, h.where(), err)
	}
	return nil
}

// DeleteFirewallOwned removes every element (and rule of the older layout)
// whose owner del reports true for: GC's sweep, one listing of each map.
// lock is as FirewallRules.Lock.
func (h *Handle) DeleteFirewallOwned(del func(owner string) bool, lock func() (func(), error)) error {
	if _, err := h.nftConn(); err != nil {
		return err
	}
	err := errors.Join(h.fwDeleteOwned(del), h.fwLegacyDelete(del, lock))
	if err != nil {
		return fmt.Errorf("delete firewall elements in %s: %w", h.where(), err)
	}
	return nil
}

// CheckFirewall reports (as an error wrapping ErrNotFound) what of r is
// missing: the table's chains and iptables' jumps, the admin chain, an
// element of each address in the maps of its policy.
func (h *Handle) CheckFirewall(r FirewallRules) error {
	if _, err := h.nftConn(); err != nil {
		return err
	}
	if err := h.fwCheckSchema(r.AdminChain); err != nil {
		return err
	}
	return h.fwCheckElems(r)
}
