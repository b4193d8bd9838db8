package lbipam

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/labels"
)

// Port is a port of a Service: two Services that share an address may not
// have one in common.
type Port struct {
	Protocol string
	Port     int32
}

// Service is what the plan reads of a Service.
type Service struct {
	Namespace, Name string
	Labels          map[string]string
	Created         time.Time
	// Eligible: type LoadBalancer, and spec.loadBalancerClass unset or
	// cnibox's (Class).
	Eligible bool
	// Ours: its status carries the controller's condition (Condition):
	// its ingress is the controller's to clear once it is not Eligible.
	Ours bool
	// Families are spec.ipFamilies in order ("IPv4", "IPv6" as 4 and 6);
	// Dual: ipFamilyPolicy PreferDualStack or RequireDualStack (else the
	// first family only); Require: RequireDualStack.
	Families      []int
	Dual, Require bool
	// Requested are the addresses asked for (spec.loadBalancerIP, the
	// annotation AnnotationIPs); BadRequest says why
	// what was asked for does not parse ("" it does).
	Requested  []netip.Addr
	BadRequest string
	// SharingKey is MetalLB's allow-shared-ip ("": shares nothing).
	SharingKey string
	// Pool is the pool the Service names (MetalLB's address-pool
	// annotation, AnnotationPool; "" none): its addresses come from that
	// pool only, whether the pool assigns automatically or not.
	Pool  string
	Ports []Port
	// Local: externalTrafficPolicy Local; Selector: spec.selector written
	// canonically (two Local Services share an address only with the same
	// pods).
	Local    bool
	Selector string
	// Holds are the addresses of status.loadBalancer.ingress.
	Holds []netip.Addr
}

// Key is "namespace/name".
func (s *Service) Key() string { return s.Namespace + "/" + s.Name }

// labels are the Service's labels and the two the pools may select on.
func (s *Service) labels() labels.Labels {
	ls := make(labels.Set, len(s.Labels)+2)
	for k, v := range s.Labels {
		ls[k] = v
	}
	ls[NamespaceLabel], ls[NameLabel] = s.Namespace, s.Name
	return ls
}

// wanted are the families the Service takes addresses of.
func (s *Service) wanted() []int {
	if !s.Dual && len(s.Families) > 1 {
		return s.Families[:1]
	}
	return s.Families
}

// MetalLB's annotations, which the controller honours, each also under
// MetalLB's current prefix metallb.io/ (AnnotationStable), which wins
// where a Service has both, as in MetalLB.
const (
	AnnotationIPs   = "metallb.universe.tf/loadBalancerIPs"
	AnnotationShare = "metallb.universe.tf/allow-shared-ip"
	// AnnotationPool names the pool a Service takes its addresses from.
	AnnotationPool = "metallb.universe.tf/address-pool"
)

// The reasons of a Problem (and of the Warning Events on the Service).
const (
	ReasonNoPool    = "NoPool"           // no usable pool selects the Service for a family it needs
	ReasonExhausted = "PoolExhausted"    // the pools that select it have no free address
	ReasonRefused   = "AddressRefused"   // an address asked for cannot be given
	ReasonAllocated = "AddressAllocated" // (the condition's, when all is well)
)

// Problem is why a Service lacks an address it asked for.
type Problem struct {
	Reason, Message string
}

// Result is what a Service should hold.
type Result struct {
	// Addrs are the ingress addresses, in the order of its families;
	// nil for a Service that is not Eligible (its ingress is cleared when
	// it is Ours).
	Addrs []netip.Addr
	// Pools are the pools of Addrs, one each.
	Pools   []string
	Problem *Problem
}

// Usage is how many addresses of a pool are held, of how many.
type Usage struct{ Used, Size float64 }

// holder is who holds an address.
type holder struct {
	services []string
	key      string // the sharing key ("": shares nothing)
	foreign  bool   // a Service not the controller's: shares nothing
	ports    map[Port]bool
	local    bool
	selector string
}

// shares reports whether s may take an address h holds.
func (h *holder) shares(s *Service) bool {
	if h.foreign || h.key == "" || h.key != s.SharingKey {
		return false
	}
	for _, p := range s.Ports {
		if h.ports[p] {
			return false
		}
	}
	return !(h.local || s.Local) || h.selector == s.Selector
}

// why says why s may not take an address h holds.
func (h *holder) why(s *Service) string {
	by := strings.Join(h.services, ", ")
	switch {
	case h.foreign:
		return "it is the load-balancer address of " + by + ", which another controller serves"
	case s.SharingKey == "" || h.key != s.SharingKey:
		return "it is held by " + by + " and the two do not have the same metallb.universe.tf/allow-shared-ip key"
	case !(h.local || s.Local) || h.selector == s.Selector:
		return "it is held by " + by + ", which serves a port of this Service's on it"
	}
	return "it is held by " + by + " and a Service of externalTrafficPolicy Local shares an address only with Services of the same selector"
}

// planner is one run of Plan.
type planner struct {
	pools []*Pool
	held  map[netip.Addr]*holder
}

// claim records that s holds a.
func (p *planner) claim(a netip.Addr, s *Service) {
	h := p.held[a]
	if h == nil {
		h = &holder{key: s.SharingKey, ports: map[Port]bool{}, local: s.Local, selector: s.Selector, foreign: !s.Eligible}
		p.held[a] = h
	}
	h.services = append(h.services, s.Key())
	h.local = h.local || s.Local
	for _, pt := range s.Ports {
		h.ports[pt] = true
	}
}

// free reports whether s may take a: nobody holds it, or its holders
// share it with s.
func (p *planner) free(a netip.Addr, s *Service) bool {
	h := p.held[a]
	return h == nil || h.shares(s)
}

// poolOf is the usable pool of a for s (nil: none), and, when there is
// none, why not.
func (p *planner) poolOf(a netip.Addr, s *Service, ls labels.Labels) (*Pool, string) {
	why := "it is in no LoadBalancerIPPool"
	for _, pl := range p.pools {
		if !pl.holds(a) {
			continue
		}
		switch {
		case s.Pool != "" && pl.Name != s.Pool:
			why = "it is in pool " + pl.Name + ", not in pool " + s.Pool + " which the Service's annotation " + AnnotationPool + " names"
		case pl.usable(ls):
			return pl, ""
		case pl.Disabled:
			why = "its pool " + pl.Name + " is disabled"
		case pl.Conflict != "":
			why = "its pool " + pl.Name + " is not allocated from: " + pl.Conflict
		default:
			why = "its pool " + pl.Name + "'s serviceSelector does not select the Service"
		}
	}
	return nil, why
}

// Plan returns what each Service (by Key) should hold, and each pool's
// usage (by name). Services claim in the order of their creation (then
// name): each keeps what its status holds while that is still valid for
// it and free of an earlier claim it may not share; then each Eligible
// Service is given what it lacks, the addresses it asked for or the
// lowest free address of the first pool (by age, then name) that selects
// it, preferring an address held by Services of its sharing key. A
// Service that is not Eligible claims what its status holds, so that no
// address another controller gave out is given again. pools are sorted
// as Refuse sorts them.
func Plan(pools []*Pool, svcs []*Service) (map[string]Result, map[string]Usage) {
	p := &planner{pools: pools, held: map[netip.Addr]*holder{}}
	order := slices.Clone(svcs)
	slices.SortFunc(order, func(a, b *Service) int {
		return cmp.Or(a.Created.Compare(b.Created), strings.Compare(a.Key(), b.Key()))
	})
	out := make(map[string]Result, len(svcs))
	kept := make(map[string][]netip.Addr, len(svcs))
	for _, s := range order {
		if !s.Eligible {
			if !s.Ours {
				for _, a := range s.Holds {
					p.claim(a, s)
				}
			}
			continue
		}
		kept[s.Key()] = p.keep(s)
	}
	for _, s := range order {
		if s.Eligible {
			out[s.Key()] = p.fill(s, kept[s.Key()])
		} else if s.Ours {
			out[s.Key()] = Result{}
		}
	}
	usage := make(map[string]Usage, len(pools))
	for _, pl := range pools {
		u := Usage{Size: pl.Size()}
		for a := range p.held {
			if pl.holds(a) {
				u.Used++
			}
		}
		usage[pl.Name] = u
	}
	return out, usage
}

// keep claims and returns what s holds that it may keep: one address a
// family it takes, in a pool that selects it (disabled or not: a disabled
// pool gives nothing new and takes nothing back) and has no conflict,
// asked for when it asks, free of any claim it may not share.
func (p *planner) keep(s *Service) []netip.Addr {
	ls := s.labels()
	want := s.wanted()
	var out []netip.Addr
	for _, a := range s.Holds {
		fam := family(a)
		if !slices.Contains(want, fam) || slices.ContainsFunc(out, func(b netip.Addr) bool { return family(b) == fam }) {
			continue
		}
		if len(s.Requested) > 0 && !slices.Contains(s.Requested, a) {
			continue
		}
		if !p.keeps(a, s, ls) || !p.free(a, s) {
			continue
		}
		p.claim(a, s)
		out = append(out, a)
	}
	return out
}

// fill gives s what it lacks beyond have.
func (p *planner) fill(s *Service, have []netip.Addr) Result {
	ls := s.labels()
	var prob *Problem
	if s.BadRequest != "" {
		return Result{Addrs: have, Pools: p.poolsOf(have, s, ls), Problem: &Problem{Reason: ReasonRefused, Message: s.BadRequest}}
	}
	if len(s.Requested) > 0 {
		for _, a := range s.Requested {
			if slices.Contains(have, a) {
				continue
			}
			if !slices.Contains(s.wanted(), family(a)) {
				prob = &Problem{ReasonRefused, fmt.Sprintf("address %s asked for: the Service's ipFamilies (and ipFamilyPolicy) take no IPv%d address", a, family(a))}
				continue
			}
			if slices.ContainsFunc(have, func(b netip.Addr) bool { return family(b) == family(a) }) {
				prob = &Problem{ReasonRefused, fmt.Sprintf("address %s asked for: a Service has one address of a family", a)}
				continue
			}
			if pl, why := p.poolOf(a, s, ls); pl == nil {
				prob = &Problem{ReasonRefused, fmt.Sprintf("address %s asked for: %s", a, why)}
				continue
			}
			if !p.free(a, s) {
				prob = &Problem{ReasonRefused, fmt.Sprintf("address %s asked for: %s", a, p.held[a].why(s))}
				continue
			}
			p.claim(a, s)
			have = append(have, a)
		}
		return Result{Addrs: sortFamilies(have, s.Families), Pools: p.poolsOf(sortFamilies(have, s.Families), s, ls), Problem: prob}
	}
	for i, fam := range s.wanted() {
		if slices.ContainsFunc(have, func(b netip.Addr) bool { return family(b) == fam }) {
			continue
		}
		needed := i == 0 || s.Require
		var usable []*Pool
		for _, pl := range p.pools {
			if pl.usable(ls) && pl.assigns(s) && slices.ContainsFunc(pl.Blocks, func(b Block) bool { return family(b.First) == fam }) {
				usable = append(usable, pl)
			}
		}
		if len(usable) == 0 {
			if needed && prob == nil {
				prob = &Problem{ReasonNoPool, p.noPool(s, fam, ls)}
			}
			continue
		}
		if a, ok := p.pick(s, fam, usable); ok {
			p.claim(a, s)
			have = append(have, a)
			continue
		}
		if prob == nil {
			names := make([]string, len(usable))
			for i, pl := range usable {
				names[i] = pl.Name
			}
			prob = &Problem{ReasonExhausted, fmt.Sprintf("no free IPv%d address in the pools that select this Service: %s", fam, strings.Join(names, ", "))}
		}
	}
	have = sortFamilies(have, s.Families)
	return Result{Addrs: have, Pools: p.poolsOf(have, s, ls), Problem: prob}
}

// pick is the address s takes of family fam: one its sharing key's
// Services hold and share with it, else the lowest free one of the first
// pool that has one.
func (p *planner) pick(s *Service, fam int, pools []*Pool) (netip.Addr, bool) {
	if s.SharingKey != "" {
		var best netip.Addr
		for a, h := range p.held {
			if family(a) == fam && h.shares(s) && slices.ContainsFunc(pools, func(pl *Pool) bool { return pl.holds(a) }) && (!best.IsValid() || a.Less(best)) {
				best = a
			}
		}
		if best.IsValid() {
			return best, true
		}
	}
	for _, pl := range pools {
		for _, b := range pl.Blocks {
			if family(b.First) != fam {
				continue
			}
			for a := b.First; a.IsValid() && a.Compare(b.Last) <= 0; a = a.Next() {
				if p.held[a] == nil {
					return a, true
				}
			}
		}
	}
	return netip.Addr{}, false
}

// noPool says why no pool gives s an address of family fam.
func (p *planner) noPool(s *Service, fam int, ls labels.Labels) string {
	if s.Pool == "" {
		return fmt.Sprintf("no LoadBalancerIPPool gives IPv%d addresses to this Service (none has a block of the family, enabled, free of conflicts, whose serviceSelector selects it and whose autoAssign is not false; a pool of autoAssign false gives only to Services that ask for one of its addresses or name it in the annotation %s)", fam, AnnotationPool)
	}
	named := "the Service's annotation " + AnnotationPool + " names pool " + s.Pool
	i := slices.IndexFunc(p.pools, func(pl *Pool) bool { return pl.Name == s.Pool })
	if i < 0 {
		return named + ", and there is no LoadBalancerIPPool of that name: name one that kubectl get lbippools lists, or remove the annotation"
	}
	switch pl := p.pools[i]; {
	case pl.Disabled:
		return named + ", which is disabled"
	case pl.Conflict != "":
		return named + ", which is not allocated from: " + pl.Conflict
	case !pl.usable(ls):
		return named + ", whose serviceSelector does not select the Service"
	}
	return fmt.Sprintf("%s, which has no IPv%d block", named, fam)
}

// poolsOf names the pool of each address.
func (p *planner) poolsOf(as []netip.Addr, s *Service, ls labels.Labels) []string {
	var out []string
	for _, a := range as {
		name := ""
		if pl, _ := p.poolOf(a, s, ls); pl != nil {
			name = pl.Name
		}
		out = append(out, name)
	}
	return out
}

// family is 4 or 6.
func family(a netip.Addr) int {
	if a.Unmap().Is4() {
		return 4
	}
	return 6
}

// sortFamilies orders as by the position of their family in fams.
func sortFamilies(as []netip.Addr, fams []int) []netip.Addr {
	slices.SortStableFunc(as, func(a, b netip.Addr) int {
		return slices.Index(fams, family(a)) - slices.Index(fams, family(b))
	})
	return as
}

// keeps reports whether Service s (of labels ls) may keep a: a pool
// without a conflict whose selector selects the Service holds it, the
// pool s names if it names one (a pool that no longer assigns
// automatically, like a disabled one, takes nothing back).
func (p *planner) keeps(a netip.Addr, s *Service, ls labels.Labels) bool {
	return slices.ContainsFunc(p.pools, func(pl *Pool) bool {
		return pl.Conflict == "" && (pl.Selector == nil || pl.Selector.Matches(ls)) && pl.holds(a) && (s.Pool == "" || s.Pool == pl.Name)
	})
}
