package policy

import (
	"cmp"
	"net/netip"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/cnibox/cnibox/internal/policymodel"
)

// selector is a compiled label selector with a canonical text (labels'
// String is "" for both everything and nothing).
type selector struct {
	sel  labels.Selector
	text string
}

var everything = selector{labels.Everything(), "{}"}

// compileSelector compiles ls (nil selects nothing, empty everything).
func compileSelector(ls *metav1.LabelSelector) (selector, error) {
	if ls == nil {
		return selector{labels.Nothing(), "<none>"}, nil
	}
	s, err := metav1.LabelSelectorAsSelector(ls)
	if err != nil {
		return selector{}, err
	}
	return selector{s, "{" + s.String() + "}"}, nil
}

// matches reports whether s takes labels l; the zero selector takes none
// (a NetworkPolicy without a namespace, which no API server sends, left
// podSel's nsSel unset and panicked here).
func (s selector) matches(l map[string]string) bool {
	return s.sel != nil && s.sel.Matches(labels.Set(l))
}

// podSel selects pods: in the namespace ns, or ("" ) in the namespaces nsSel
// selects; with labels podSel selects; of this node only if local.
type podSel struct {
	ns     string
	nsSel  selector
	podSel selector
	local  bool
}

func (s podSel) key() string {
	var b strings.Builder
	b.WriteString("pods ")
	if s.ns != "" {
		b.WriteString("ns=" + s.ns)
	} else {
		b.WriteString("nsSel=" + s.nsSel.text)
	}
	b.WriteString(" podSel=" + s.podSel.text)
	if s.local {
		b.WriteString(" local")
	}
	return b.String()
}

// matches reports whether the selector takes p (in the namespace ns; nil if
// not known yet: no labels) on the node node.
func (s podSel) matches(p *Pod, ns *Namespace, node string) bool {
	if !p.Selectable() || (s.local && p.Node != node) {
		return false
	}
	if s.ns != "" {
		if p.Namespace != s.ns {
			return false
		}
	} else {
		var l map[string]string
		if ns != nil {
			l = ns.Labels
		}
		if !s.nsSel.matches(l) {
			return false
		}
	}
	return s.podSel.matches(p.Labels)
}

// setDef defines a set: static prefixes (CIDRs), or the addresses (Addrs)
// or named ports (Ported) of the pods match takes.
type setDef struct {
	key    string
	kind   policymodel.SetKind
	static []netip.Prefix
	// match selects pods; nil for a static set.
	match func(p *Pod, ns *Namespace, node string) bool
	local bool // match takes only this node's pods
	// derived sets are not defined by their key (the isolated pods: their
	// policies define them): every rebuild computes them again.
	derived bool
	// ns is the one namespace whose pods match may take ("": any); else
	// nsSel, if set, selects the namespaces (match reads their labels).
	ns    string
	nsSel *selector
	// ports are a Ported set's named ports (sorted): a pod's port is in
	// the set when one of them names it.
	ports []namedPort
	// nodeSel, for a set of nodes' addresses (a `nodes` peer), selects
	// the nodes; match is nil then.
	nodeSel *selector
}

// podSetDef is the set of the addresses of the pods s selects.
func podSetDef(s podSel) *setDef {
	d := &setDef{key: s.key(), kind: policymodel.Addrs, match: s.matches, local: s.local, ns: s.ns}
	if s.ns == "" {
		d.nsSel = &s.nsSel
	}
	return d
}

// pairsSetDef is the Pairs set of a domainNames peer with names (lowercased,
// sorted): every peer with the same names shares it, since its elements
// are (pod, address) pairs.
func pairsSetDef(names []string) *setDef {
	return &setDef{key: "domains " + strings.Join(names, ","), kind: policymodel.Pairs}
}

// portedSetDef is the set of the named ports ports (name/proto, proto 0:
// any) of the pods s selects: one set for all the named ports of a rule
// (issue 60, finding 5: one set each made a policy of 4,095 named ports
// 4,095 sets, and a full sync the kernel refused).
func portedSetDef(s podSel, ports []namedPort) *setDef {
	ports = slices.Clone(ports)
	slices.SortFunc(ports, func(a, b namedPort) int {
		return cmp.Or(strings.Compare(a.name, b.name), cmp.Compare(a.proto, b.proto))
	})
	ports = slices.Compact(ports)
	d := podSetDef(s)
	d.kind, d.ports = policymodel.Ported, ports
	texts := make([]string, len(ports))
	for i, n := range ports {
		texts[i] = n.name + "/" + protoText(n.proto)
	}
	d.key += " port=" + strings.Join(texts, ",")
	return d
}

// has reports whether one of d's named ports names np.
func (d *setDef) has(np NamedPort) bool {
	return slices.ContainsFunc(d.ports, func(n namedPort) bool {
		return n.name == np.Name && (n.proto == 0 || n.proto == np.Proto)
	})
}

func protoText(p policymodel.Protocol) string {
	if p == 0 {
		return "any"
	}
	return p.String()
}

// nodeSetDef is the set of the addresses of the nodes s selects.
func nodeSetDef(s selector) *setDef {
	return &setDef{key: "nodes sel=" + s.text, kind: policymodel.Addrs, nodeSel: &s}
}

// nodeElems returns what node n puts in the set: its addresses if the
// set is of the nodes its selector takes.
func (d *setDef) nodeElems(n *Node) []policymodel.Elem {
	if d.nodeSel == nil || n == nil || !d.nodeSel.matches(n.Labels) {
		return nil
	}
	out := make([]policymodel.Elem, len(n.IPs))
	for i, a := range n.IPs {
		out[i] = policymodel.Elem{Prefix: hostPrefix(a)}
	}
	return out
}

// staticSetDef is the set of the prefixes ps.
func staticSetDef(ps []netip.Prefix) *setDef {
	ps = slices.Clone(ps)
	slices.SortFunc(ps, func(a, b netip.Prefix) int {
		return policymodel.CompareElem(policymodel.Elem{Prefix: a}, policymodel.Elem{Prefix: b})
	})
	ps = slices.Compact(ps)
	texts := make([]string, len(ps))
	for i, p := range ps {
		texts[i] = p.String()
	}
	return &setDef{key: "cidrs " + strings.Join(texts, ","), kind: policymodel.CIDRs, static: ps}
}

// elems returns what p (in ns, on node) puts in the set.
func (d *setDef) elems(p *Pod, ns *Namespace, node string) []policymodel.Elem {
	return d.appendElems(nil, p, ns, node)
}

// appendElems appends to out what p (in ns, on node) puts in the set.
func (d *setDef) appendElems(out []policymodel.Elem, p *Pod, ns *Namespace, node string) []policymodel.Elem {
	if d.match == nil || p == nil || !d.match(p, ns, node) {
		return out
	}
	for _, a := range p.IPs {
		pfx := netip.PrefixFrom(a, a.BitLen())
		if d.kind != policymodel.Ported {
			out = append(out, policymodel.Elem{Prefix: pfx})
			continue
		}
		for _, np := range p.Ports {
			if d.has(np) {
				out = append(out, policymodel.Elem{Prefix: pfx, Proto: np.Proto, Port: np.Port})
			}
		}
	}
	return out
}
