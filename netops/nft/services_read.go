package nft

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/google/nftables/userdata"
	"golang.org/x/sys/unix"
)

// Reading the services table back from the kernel (services.go draws it),
// for `cnibox inspect services` and `cnibox doctor`: what the node serves,
// one frontend at a time, as the kernel holds it, not as the agent meant
// it.

// ServiceFrontend is one frontend of the services table with what its
// chain does.
type ServiceFrontend struct {
	// Service is the Service port, "namespace/name:port", as the rules'
	// comments name it.
	Service  string `json:"service"`
	Protocol string `json:"protocol"` // TCP, UDP, SCTP
	Family   int    `json:"family"`   // 4 or 6
	// Kind: ClusterIP, NodePort, External (an externalIP or a
	// LoadBalancer ingress IP: the table does not tell them apart) or
	// LoadBalancer (one with loadBalancerSourceRanges).
	Kind string `json:"kind"`
	// Addr is the frontend's address; invalid for a NodePort (served on
	// ServicesTableView.NodePortAddrs).
	Addr netip.Addr `json:"addr,omitzero"`
	Port uint16     `json:"port"`
	// Endpoints are what the frontend's traffic is DNATed to, sorted.
	Endpoints []netip.AddrPort `json:"endpoints"`
	// Slots is the size of the endpoints' slot table (0: one endpoint or
	// none).
	Slots int `json:"slots,omitempty"`
	// NoEndpoints is "reject" or "drop" when there is no endpoint for
	// this frontend's traffic.
	NoEndpoints string `json:"noEndpoints,omitempty"`
	// Affinity is sessionAffinity ClientIP's timeout; 0: none. In JSON
	// whole seconds (timeoutSeconds, as the Service spells it).
	Affinity time.Duration `json:"-"`
	// AffinitySeconds is Affinity for JSON.
	AffinitySeconds int64 `json:"affinitySeconds,omitempty"`
	// Masquerade says which of its traffic is masqueraded: "all",
	// "from outside the cluster", "from the node", or "" (none: the
	// client's address is kept).
	Masquerade string `json:"masquerade,omitempty"`
	// SourceRanges: loadBalancerSourceRanges drop other sources.
	SourceRanges bool `json:"sourceRanges,omitempty"`
}

// ServicesTableView is the services table as the kernel holds it.
type ServicesTableView struct {
	Frontends     []ServiceFrontend `json:"frontends"`
	NodePortAddrs []netip.Addr      `json:"nodePortAddrs"`
}

// ReadServices reads the services tables of h's namespace (the main
// table and its shards, whatever their count); nil, nil when there are
// none.
func (h *Handle) ReadServices() (*ServicesTableView, error) {
	names, err := h.ServicesTablesIn()
	if err != nil || len(names) == 0 {
		if err != nil {
			return nil, fmt.Errorf("read the services table in %s: %w", h.where(), err)
		}
		return nil, nil
	}
	v := &ServicesTableView{Frontends: []ServiceFrontend{}, NodePortAddrs: []netip.Addr{}}
	for _, name := range names {
		r := &svcReader{h: h, table: &nftables.Table{Name: name, Family: nftables.TableFamilyINet},
			elems: map[string][]nftElem{}, sets: map[string]*nftables.Set{}, slotsOf: map[string]map[string][]nftElem{}}
		if err := r.read(v); err != nil {
			return nil, fmt.Errorf("read the services table %s in %s: %w", name, h.where(), err)
		}
	}
	for i := range v.Frontends {
		v.Frontends[i].AffinitySeconds = int64(v.Frontends[i].Affinity / time.Second)
	}
	slices.SortFunc(v.Frontends, func(a, b ServiceFrontend) int {
		return cmp.Or(cmp.Compare(a.Service, b.Service), cmp.Compare(a.Family, b.Family), cmp.Compare(a.Protocol, b.Protocol),
			cmp.Compare(kindOrder(a.Kind), kindOrder(b.Kind)), a.Addr.Compare(b.Addr), cmp.Compare(a.Port, b.Port))
	})
	slices.SortFunc(v.NodePortAddrs, netip.Addr.Compare)
	v.NodePortAddrs = slices.Compact(v.NodePortAddrs)
	return v, nil
}

// svcReader reads one of the services tables.
type svcReader struct {
	h     *Handle
	table *nftables.Table
	rules map[string][]*nftables.Rule
	sets  map[string]*nftables.Set
	elems map[string][]nftElem // by set, read once
	// slotsOf: each slot map's elements by slot table ID (the key's first
	// 8 bytes), indexed once.
	slotsOf map[string]map[string][]nftElem
}

// setElems are the elements of set name; none when the table has no
// such set (the main table has no frontend maps).
func (r *svcReader) setElems(name string) ([]nftElem, error) {
	if es, ok := r.elems[name]; ok {
		return es, nil
	}
	if r.sets[name] == nil {
		return nil, nil
	}
	es, err := r.h.dumpFamilyElems(r.table.Family, r.table.Name, name)
	if err != nil {
		return nil, err
	}
	r.elems[name] = es
	return es, nil
}

// read adds the table's frontends and NodePort addresses to v.
func (r *svcReader) read(v *ServicesTableView) error {
	var err error
	if r.rules, err = r.h.dumpRules(r.table, ""); err != nil {
		return err
	}
	sets, err := consistently(r.h, func() ([]*nftables.Set, error) { return r.h.nft.GetSets(r.table) })
	if err != nil {
		return fmt.Errorf("list sets: %w", err)
	}
	for _, s := range sets {
		r.sets[s.Name] = s
	}
	for _, name := range []string{svcNodePortAddrs4, svcNodePortAddrs6} {
		es, err := r.setElems(name)
		if err != nil {
			return err
		}
		for _, e := range es {
			if a, ok := netip.AddrFromSlice(e.key); ok {
				v.NodePortAddrs = append(v.NodePortAddrs, a)
			}
		}
	}
	for _, f := range []fam{fam4, fam6} {
		es, err := r.setElems(f.ips)
		if err != nil {
			return err
		}
		for _, e := range es {
			if len(e.key) != int(f.alen)+8 || e.jump == "" {
				continue
			}
			a, _ := netip.AddrFromSlice(e.key[:f.alen])
			fe := ServiceFrontend{Family: int(f.f), Addr: a, Protocol: protoName(e.key[f.alen]),
				Port: uint16(e.key[f.alen+4])<<8 | uint16(e.key[f.alen+5])}
			if err := r.fill(&fe, e.jump); err != nil {
				return err
			}
			v.Frontends = append(v.Frontends, fe)
		}
	}
	nps, err := r.setElems(ServiceNodePorts)
	if err != nil {
		return err
	}
	for _, e := range nps {
		if len(e.key) != 8 || e.jump == "" {
			continue
		}
		// The NodePort's chain: per family, a goto to its ServicePort's
		// external chain.
		for _, rule := range r.rules[e.jump] {
			f, target := 0, ""
			for _, x := range rule.Exprs {
				switch x := x.(type) {
				case *expr.Cmp:
					if len(x.Data) == 1 {
						f = nfprotoFamily(x.Data[0])
					}
				case *expr.Verdict:
					if x.Kind == expr.VerdictGoto {
						target = x.Chain
					}
				}
			}
			if f == 0 || target == "" {
				continue
			}
			fe := ServiceFrontend{Kind: "NodePort", Family: f, Protocol: protoName(e.key[0]), Port: uint16(e.key[4])<<8 | uint16(e.key[5])}
			if err := r.fill(&fe, target); err != nil {
				return err
			}
			v.Frontends = append(v.Frontends, fe)
		}
	}
	return nil
}

func kindOrder(k string) int {
	return slices.Index([]string{"ClusterIP", "NodePort", "External", "LoadBalancer"}, k)
}

func protoName(p byte) string {
	switch p {
	case unix.IPPROTO_TCP:
		return "TCP"
	case unix.IPPROTO_UDP:
		return "UDP"
	case unix.IPPROTO_SCTP:
		return "SCTP"
	}
	return fmt.Sprintf("proto-%d", p)
}

func nfprotoFamily(p byte) int {
	switch p {
	case unix.NFPROTO_IPV4:
		return 4
	case unix.NFPROTO_IPV6:
		return 6
	}
	return 0
}

// fill sets fe's kind (unless set), Service and what its chain does.
func (r *svcReader) fill(fe *ServiceFrontend, chain string) error {
	if fe.Kind == "" {
		switch {
		case strings.HasPrefix(chain, "svc-"):
			fe.Kind = "ClusterIP"
		case strings.HasPrefix(chain, "lb-"):
			fe.Kind = "LoadBalancer"
		default:
			fe.Kind = "External"
		}
	}
	if rules := r.rules[chain]; len(rules) > 0 {
		c, _ := userdata.GetString(rules[0].UserData, userdata.TypeComment)
		fe.Service, _, _ = strings.Cut(c, " ")
	}
	fe.Endpoints = []netip.AddrPort{}
	return r.walk(fe, chain, 0)
}

// walk reads chain's rules into fe, following the gotos every packet
// takes (an external chain of a Cluster policy to the internal one, the
// source ranges' chain to the external one).
func (r *svcReader) walk(fe *ServiceFrontend, chain string, depth int) error {
	if depth > 4 {
		return fmt.Errorf("chain %s: gotos too deep", chain)
	}
	for _, rule := range r.rules[chain] {
		var conditional, fib, outside, markSet, natted bool
		var slotMap, goTo string
		var epAddr []byte
		var epPort uint16
		var tid [2][]byte
		for _, x := range rule.Exprs {
			switch x := x.(type) {
			case *expr.Lookup:
				switch {
				case strings.HasPrefix(x.SetName, svcSlots4) || strings.HasPrefix(x.SetName, svcSlots6):
					slotMap = x.SetName
				case strings.HasPrefix(x.SetName, "af-"):
				case strings.HasPrefix(x.SetName, "src-"):
					fe.SourceRanges = true
					conditional = true
				default:
					conditional = true
					outside = outside || (x.Invert && strings.HasPrefix(x.SetName, "cluster-cidrs"))
				}
			case *expr.Fib:
				conditional, fib = true, true
			case *expr.Meta:
				markSet = markSet || (x.Key == expr.MetaKeyMARK && x.SourceRegister)
			case *expr.Immediate:
				switch reg(x.Register) {
				case reg(regEP):
					epAddr = x.Data
				case reg(regSlotKey):
					tid[0] = x.Data
				case reg(regSlotKey + 1):
					tid[1] = x.Data
				default:
					if epAddr != nil && reg(x.Register) == reg(regEP)+uint32(len(epAddr))/4 && len(x.Data) >= 2 {
						epPort = uint16(x.Data[0])<<8 | uint16(x.Data[1])
					}
				}
			case *expr.Dynset:
				fe.Affinity = x.Timeout
				if s := r.sets[x.SetName]; s != nil && fe.Affinity == 0 {
					fe.Affinity = s.Timeout
				}
			case *expr.NAT:
				natted = true
			case *expr.Reject:
				if fe.NoEndpoints == "" {
					fe.NoEndpoints = "reject"
				}
			case *expr.Verdict:
				switch x.Kind {
				case expr.VerdictDrop:
					if !conditional && fe.NoEndpoints == "" {
						fe.NoEndpoints = "drop"
					}
				case expr.VerdictGoto:
					goTo = x.Chain
				}
			}
		}
		if markSet {
			switch {
			case !conditional:
				fe.Masquerade = "all"
			case fe.Masquerade == "all":
			case outside:
				fe.Masquerade = "from outside the cluster"
			case fib:
				fe.Masquerade = "from the node"
			}
		}
		if goTo != "" && !conditional {
			masq := fe.Masquerade
			if err := r.walk(fe, goTo, depth+1); err != nil {
				return err
			}
			if masq == "all" {
				fe.Masquerade = masq
			}
			return nil
		}
		if !natted || len(fe.Endpoints) > 0 {
			continue
		}
		if slotMap == "" && epAddr != nil {
			if a, ok := netip.AddrFromSlice(epAddr); ok {
				fe.Endpoints = append(fe.Endpoints, netip.AddrPortFrom(a, epPort))
			}
			continue
		}
		if slotMap != "" && len(tid[0]) == 4 && len(tid[1]) == 4 {
			if err := r.slots(fe, slotMap, append(slices.Clone(tid[0]), tid[1]...)); err != nil {
				return err
			}
		}
	}
	return nil
}

// slots sets fe's endpoints to those of slot table tid in slot map name.
func (r *svcReader) slots(fe *ServiceFrontend, name string, tid []byte) error {
	byID, ok := r.slotsOf[name]
	if !ok {
		es, err := r.setElems(name)
		if err != nil {
			return err
		}
		byID = map[string][]nftElem{}
		for _, e := range es {
			if len(e.key) >= 8 {
				byID[string(e.key[:8])] = append(byID[string(e.key[:8])], e)
			}
		}
		r.slotsOf[name] = byID
	}
	alen := 4
	if strings.HasPrefix(name, svcSlots6) {
		alen = 16
	}
	seen := map[netip.AddrPort]bool{}
	for _, e := range byID[string(tid)] {
		if len(e.data) < alen+2 {
			continue
		}
		fe.Slots++
		a, _ := netip.AddrFromSlice(e.data[:alen])
		ap := netip.AddrPortFrom(a, uint16(e.data[alen])<<8|uint16(e.data[alen+1]))
		if !seen[ap] {
			seen[ap] = true
			fe.Endpoints = append(fe.Endpoints, ap)
		}
	}
	slices.SortFunc(fe.Endpoints, netip.AddrPort.Compare)
	return nil
}
