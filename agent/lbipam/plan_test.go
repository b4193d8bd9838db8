package lbipam

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/labels"
)

func addrs(ss ...string) []netip.Addr {
	var out []netip.Addr
	for _, s := range ss {
		out = append(out, netip.MustParseAddr(s))
	}
	return out
}

func pool(name string, blocks ...string) *Pool {
	p := &Pool{Name: name}
	for _, b := range blocks {
		spec := BlockSpec{CIDR: b}
		if first, last, ok := strings.Cut(b, "-"); ok {
			spec = BlockSpec{Start: first, Stop: last}
		}
		blk, err := ParseBlock(spec, false)
		if err != nil {
			panic(err)
		}
		p.Blocks = append(p.Blocks, blk)
	}
	return p
}

// svc is an eligible IPv4 Service created at minute n.
func svc(n int, name string, mod ...func(*Service)) *Service {
	s := &Service{Namespace: "default", Name: name, Created: time.Unix(int64(n)*60, 0), Eligible: true, Families: []int{4},
		Ports: []Port{{"TCP", 80}}}
	for _, m := range mod {
		m(s)
	}
	return s
}

func TestParseBlock(t *testing.T) {
	for _, c := range []struct {
		spec      BlockSpec
		all       bool
		want, err string
	}{
		{BlockSpec{CIDR: "192.0.2.0/24"}, false, "192.0.2.1-192.0.2.254", ""},
		{BlockSpec{CIDR: "192.0.2.0/24"}, true, "192.0.2.0-192.0.2.255", ""},
		{BlockSpec{CIDR: "192.0.2.7/32"}, false, "192.0.2.7", ""},
		{BlockSpec{CIDR: "192.0.2.6/31"}, false, "192.0.2.6-192.0.2.7", ""},
		{BlockSpec{CIDR: "2001:db8::/126"}, false, "2001:db8::1-2001:db8::2", ""},
		{BlockSpec{Start: "192.0.2.10", Stop: "192.0.2.20"}, false, "192.0.2.10-192.0.2.20", ""},
		{BlockSpec{Start: "192.0.2.20", Stop: "192.0.2.10"}, false, "", "is after stop"},
		{BlockSpec{Start: "192.0.2.20", Stop: "2001:db8::1"}, false, "", "not of one family"},
		{BlockSpec{CIDR: "192.0.2.0/33"}, false, "", "cidr"},
	} {
		b, err := ParseBlock(c.spec, c.all)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%+v: %v, want an error with %q", c.spec, err, c.err)
			}
			continue
		}
		if err != nil || b.String() != c.want {
			t.Errorf("%+v allowFirstLast %v: %v %v, want %s", c.spec, c.all, b, err, c.want)
		}
	}
}

func TestRefuse(t *testing.T) {
	a, b, c, d := pool("a", "192.0.2.0/28"), pool("b", "192.0.2.8-192.0.2.20"), pool("c", "10.96.0.0/24"), pool("d", "198.51.100.0/24")
	a.Created, b.Created = time.Unix(1, 0), time.Unix(2, 0)
	pools := []*Pool{d, c, b, a}
	Refuse(pools, map[string][]netip.Prefix{"the Services network": {netip.MustParsePrefix("10.96.0.0/12")},
		"node": {netip.MustParsePrefix("198.51.100.7/32")}})
	if pools[0] != c && pools[0] != d || pools[2] != a || pools[3] != b {
		t.Errorf("order %v %v %v %v", pools[0].Name, pools[1].Name, pools[2].Name, pools[3].Name)
	}
	for p, want := range map[*Pool]string{a: "", b: "overlaps block 192.0.2.1-192.0.2.14 of pool a", c: "overlaps the Services network 10.96.0.0/12", d: "overlaps node 198.51.100.7/32"} {
		if want == "" && p.Conflict != "" || !strings.Contains(p.Conflict, want) {
			t.Errorf("pool %s: conflict %q, want %q", p.Name, p.Conflict, want)
		}
	}
}

func TestPlan(t *testing.T) {
	web := pool("web", "192.0.2.0/30")                // .1 .2
	six := pool("six", "2001:db8::10-2001:db8::11")   // two
	sel := pool("sel", "198.51.100.10-198.51.100.10") // one, for team=b
	sel.Selector = labels.SelectorFromSet(labels.Set{"team": "b"})
	off := pool("off", "203.0.113.0-203.0.113.5")
	off.Disabled = true
	late := pool("late", "192.0.2.2-192.0.2.3") // overlaps web, younger
	late.Created = time.Unix(5, 0)
	man := pool("man", "198.51.100.20-198.51.100.21") // autoAssign false
	man.Manual, man.Created = true, time.Unix(-1, 0)  // (the oldest: first if it assigned)
	named := func(p string) func(*Service) { return func(s *Service) { s.Pool = p } }
	type want struct {
		addrs  string // comma separated; "-" none
		reason string
	}
	for _, c := range []struct {
		name  string
		pools []*Pool
		svcs  []*Service
		want  map[string]want
	}{
		{"first free, in creation order", []*Pool{web}, []*Service{svc(2, "b"), svc(1, "a")},
			map[string]want{"a": {"192.0.2.1", ""}, "b": {"192.0.2.2", ""}}},
		{"exhausted", []*Pool{web}, []*Service{svc(1, "a"), svc(2, "b"), svc(3, "c")},
			map[string]want{"c": {"-", ReasonExhausted}}},
		{"keeps its address, a newcomer takes the other", []*Pool{web}, []*Service{svc(1, "new"), svc(2, "old", func(s *Service) { s.Holds = addrs("192.0.2.1") })},
			map[string]want{"old": {"192.0.2.1", ""}, "new": {"192.0.2.2", ""}}},
		{"two hold one: the older keeps it", []*Pool{web}, []*Service{
			svc(1, "a", func(s *Service) { s.Holds = addrs("192.0.2.2") }), svc(2, "b", func(s *Service) { s.Holds = addrs("192.0.2.2") })},
			map[string]want{"a": {"192.0.2.2", ""}, "b": {"192.0.2.1", ""}}},
		{"an address out of every pool is dropped", []*Pool{web}, []*Service{svc(1, "a", func(s *Service) { s.Holds = addrs("192.0.2.9") })},
			map[string]want{"a": {"192.0.2.1", ""}}},
		{"dual stack", []*Pool{web, six}, []*Service{svc(1, "a", func(s *Service) { s.Families, s.Dual = []int{6, 4}, true })},
			map[string]want{"a": {"2001:db8::10,192.0.2.1", ""}}},
		{"single stack takes its first family", []*Pool{web, six}, []*Service{svc(1, "a", func(s *Service) { s.Families = []int{6, 4} })},
			map[string]want{"a": {"2001:db8::10", ""}}},
		{"prefer dual stack without an IPv6 pool", []*Pool{web}, []*Service{svc(1, "a", func(s *Service) { s.Families, s.Dual = []int{4, 6}, true })},
			map[string]want{"a": {"192.0.2.1", ""}}},
		{"require dual stack without an IPv6 pool", []*Pool{web}, []*Service{svc(1, "a", func(s *Service) { s.Families, s.Dual, s.Require = []int{4, 6}, true, true })},
			map[string]want{"a": {"192.0.2.1", ReasonNoPool}}},
		{"no pool selects it", []*Pool{sel}, []*Service{svc(1, "a")}, map[string]want{"a": {"-", ReasonNoPool}}},
		{"the selector (pools by age, then name)", []*Pool{web, sel}, []*Service{svc(1, "a", func(s *Service) { s.Labels = map[string]string{"team": "b"} }), svc(2, "b")},
			map[string]want{"a": {"198.51.100.10", ""}, "b": {"192.0.2.1", ""}}},
		{"a disabled pool", []*Pool{off}, []*Service{svc(1, "a")}, map[string]want{"a": {"-", ReasonNoPool}}},
		{"a disabled pool takes nothing back", []*Pool{off, web}, []*Service{svc(1, "a", func(s *Service) { s.Holds = addrs("203.0.113.1") })},
			map[string]want{"a": {"203.0.113.1", ""}}},
		{"a pool in conflict keeps nothing", []*Pool{web, late}, []*Service{svc(1, "a", func(s *Service) { s.Holds = addrs("192.0.2.3") })},
			map[string]want{"a": {"192.0.2.1", ""}}},
		{"requested", []*Pool{web}, []*Service{svc(1, "a"), svc(2, "b", func(s *Service) { s.Requested = addrs("192.0.2.1") })},
			map[string]want{"a": {"192.0.2.1", ""}, "b": {"-", ReasonRefused}}},
		{"requested, free", []*Pool{web}, []*Service{svc(1, "a", func(s *Service) { s.Requested = addrs("192.0.2.2") })},
			map[string]want{"a": {"192.0.2.2", ""}}},
		{"requested outside the pools", []*Pool{web}, []*Service{svc(1, "a", func(s *Service) { s.Requested = addrs("192.0.2.9") })},
			map[string]want{"a": {"-", ReasonRefused}}},
		{"requested of a family not taken", []*Pool{web, six}, []*Service{svc(1, "a", func(s *Service) { s.Requested = addrs("2001:db8::10") })},
			map[string]want{"a": {"-", ReasonRefused}}},
		{"a request that does not parse", []*Pool{web}, []*Service{svc(1, "a", func(s *Service) { s.BadRequest = "bad" })},
			map[string]want{"a": {"-", ReasonRefused}}},
		{"sharing: same key, other ports", []*Pool{web}, []*Service{
			svc(1, "a", func(s *Service) { s.SharingKey = "k" }),
			svc(2, "b", func(s *Service) { s.SharingKey, s.Ports = "k", []Port{{"TCP", 443}} })},
			map[string]want{"a": {"192.0.2.1", ""}, "b": {"192.0.2.1", ""}}},
		{"sharing refused: a port clash", []*Pool{web}, []*Service{
			svc(1, "a", func(s *Service) { s.SharingKey = "k" }), svc(2, "b", func(s *Service) { s.SharingKey = "k" })},
			map[string]want{"a": {"192.0.2.1", ""}, "b": {"192.0.2.2", ""}}},
		{"sharing refused: another key", []*Pool{web}, []*Service{
			svc(1, "a", func(s *Service) { s.SharingKey = "k" }),
			svc(2, "b", func(s *Service) { s.SharingKey, s.Ports, s.Requested = "j", []Port{{"TCP", 443}}, addrs("192.0.2.1") })},
			map[string]want{"a": {"192.0.2.1", ""}, "b": {"-", ReasonRefused}}},
		{"sharing: the same port of another protocol", []*Pool{web}, []*Service{
			svc(1, "a", func(s *Service) { s.SharingKey = "k" }),
			svc(2, "b", func(s *Service) { s.SharingKey, s.Ports = "k", []Port{{"UDP", 80}} })},
			map[string]want{"a": {"192.0.2.1", ""}, "b": {"192.0.2.1", ""}}},
		{"sharing refused: Local with other pods", []*Pool{web}, []*Service{
			svc(1, "a", func(s *Service) { s.SharingKey, s.Local, s.Selector = "k", true, "app=a" }),
			svc(2, "b", func(s *Service) {
				s.SharingKey, s.Ports, s.Requested, s.Local, s.Selector = "k", []Port{{"TCP", 443}}, addrs("192.0.2.1"), true, "app=b"
			})},
			map[string]want{"a": {"192.0.2.1", ""}, "b": {"-", ReasonRefused}}},
		{"sharing: both hold it, kept", []*Pool{web}, []*Service{
			svc(1, "a", func(s *Service) { s.SharingKey, s.Holds = "k", addrs("192.0.2.2") }),
			svc(2, "b", func(s *Service) { s.SharingKey, s.Ports, s.Holds = "k", []Port{{"TCP", 443}}, addrs("192.0.2.2") })},
			map[string]want{"a": {"192.0.2.2", ""}, "b": {"192.0.2.2", ""}}},
		{"another controller's address is never given", []*Pool{web}, []*Service{
			svc(1, "theirs", func(s *Service) { s.Eligible, s.Holds = false, addrs("192.0.2.1") }), svc(2, "a")},
			map[string]want{"theirs": {"", ""}, "a": {"192.0.2.2", ""}}},
		{"ours, no longer eligible: cleared", []*Pool{web}, []*Service{
			svc(1, "was", func(s *Service) { s.Eligible, s.Ours, s.Holds = false, true, addrs("192.0.2.1") }), svc(2, "a")},
			map[string]want{"was": {"-", ""}, "a": {"192.0.2.1", ""}}},
		{"autoAssign false: not given unasked", []*Pool{man, web}, []*Service{svc(1, "a")},
			map[string]want{"a": {"192.0.2.1", ""}}},
		{"autoAssign false alone: no pool", []*Pool{man}, []*Service{svc(1, "a")},
			map[string]want{"a": {"-", ReasonNoPool}}},
		{"autoAssign false: an address asked for", []*Pool{man, web}, []*Service{svc(1, "a", func(s *Service) { s.Requested = addrs("198.51.100.21") })},
			map[string]want{"a": {"198.51.100.21", ""}}},
		{"autoAssign false: named", []*Pool{man, web}, []*Service{svc(1, "a", named("man")), svc(2, "b", named("man")), svc(3, "c", named("man"))},
			map[string]want{"a": {"198.51.100.20", ""}, "b": {"198.51.100.21", ""}, "c": {"-", ReasonExhausted}}},
		{"named: that pool only", []*Pool{web, six, man}, []*Service{svc(1, "a", named("six"), func(s *Service) { s.Families = []int{6} }),
			svc(2, "b", named("six"))},
			map[string]want{"a": {"2001:db8::10", ""}, "b": {"-", ReasonNoPool}}},
		{"named: no such pool", []*Pool{web}, []*Service{svc(1, "a", named("nope"))},
			map[string]want{"a": {"-", ReasonNoPool}}},
		{"named: an address of another pool asked for", []*Pool{web, man}, []*Service{svc(1, "a", named("man"), func(s *Service) { s.Requested = addrs("192.0.2.1") })},
			map[string]want{"a": {"-", ReasonRefused}}},
		{"named: what it holds in another pool moves", []*Pool{web, man}, []*Service{svc(1, "a", named("man"), func(s *Service) { s.Holds = addrs("192.0.2.1") })},
			map[string]want{"a": {"198.51.100.20", ""}}},
		{"autoAssign turned false: kept", []*Pool{man}, []*Service{svc(1, "a", func(s *Service) { s.Holds = addrs("198.51.100.21") })},
			map[string]want{"a": {"198.51.100.21", ""}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			for _, p := range c.pools {
				p.Conflict = ""
			}
			Refuse(c.pools, nil)
			got, _ := Plan(c.pools, c.svcs)
			for name, w := range c.want {
				r, ok := got["default/"+name]
				if w.addrs == "" {
					if ok {
						t.Errorf("%s: %+v, want no result", name, r)
					}
					continue
				}
				var ss []string
				for _, a := range r.Addrs {
					ss = append(ss, a.String())
				}
				if g := cmpOr(strings.Join(ss, ","), "-"); g != w.addrs {
					t.Errorf("%s: %s, want %s (problem %+v)", name, g, w.addrs, r.Problem)
				}
				reason := ""
				if r.Problem != nil {
					reason = r.Problem.Reason
				}
				if reason != w.reason {
					t.Errorf("%s: problem %+v, want reason %q", name, r.Problem, w.reason)
				}
			}
		})
	}
}

func cmpOr(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

// TestPlanNeverTwice: whatever the Services' statuses claim (every
// Service claiming the same addresses), the plan gives no address to two
// Services that may not share it, and its usage counts each address once.
func TestPlanNeverTwice(t *testing.T) {
	pools := []*Pool{pool("p", "192.0.2.0/29", "2001:db8::/125")}
	Refuse(pools, nil)
	var svcs []*Service
	for i := range 12 {
		svcs = append(svcs, svc(i%3, string(rune('a'+i)), func(s *Service) {
			s.Holds = addrs("192.0.2.1", "192.0.2.2", "2001:db8::1")
			s.Families, s.Dual = []int{4, 6}, true
		}))
	}
	got, usage := Plan(pools, svcs)
	seen := map[netip.Addr]string{}
	n := 0
	for k, r := range got {
		for _, a := range r.Addrs {
			if o, dup := seen[a]; dup {
				t.Errorf("%s given to %s and %s", a, o, k)
			}
			seen[a] = k
		}
		n += len(r.Addrs)
	}
	if n != 12 || usage["p"].Used != 12 || usage["p"].Size != 12 {
		t.Errorf("%d addresses given, usage %+v: want 6 + 6 of 12", n, usage["p"])
	}
	if !slices.ContainsFunc(svcs, func(s *Service) bool {
		r := got[s.Key()]
		return r.Problem != nil && r.Problem.Reason == ReasonExhausted
	}) {
		t.Error("no Service told the pool is exhausted")
	}
}

// TestPlanPoolMessages: why a Service gets nothing names the annotation,
// the pool and the fix.
func TestPlanPoolMessages(t *testing.T) {
	man := pool("man", "198.51.100.20-198.51.100.21")
	man.Manual = true
	off := pool("off", "203.0.113.1-203.0.113.2")
	off.Disabled = true
	pools := []*Pool{man, off}
	Refuse(pools, nil)
	for _, c := range []struct {
		s    *Service
		want string
	}{
		{svc(1, "a"), "autoAssign is not false; a pool of autoAssign false gives only to Services that ask for one of its addresses or name it in the annotation metallb.universe.tf/address-pool"},
		{svc(1, "a", func(s *Service) { s.Pool = "nope" }), "names pool nope, and there is no LoadBalancerIPPool of that name: name one that kubectl get lbippools lists, or remove the annotation"},
		{svc(1, "a", func(s *Service) { s.Pool = "off" }), "names pool off, which is disabled"},
		{svc(1, "a", func(s *Service) { s.Pool = "man"; s.Families = []int{6} }), "names pool man, which has no IPv6 block"},
		{svc(1, "a", func(s *Service) { s.Pool = "off"; s.Requested = addrs("198.51.100.20") }), "address 198.51.100.20 asked for: it is in pool man, not in pool off which the Service's annotation metallb.universe.tf/address-pool names"},
	} {
		got, _ := Plan(pools, []*Service{c.s})
		r := got[c.s.Key()]
		if r.Problem == nil || !strings.Contains(r.Problem.Message, c.want) {
			t.Errorf("%+v: problem %+v, want %q", c.s, r.Problem, c.want)
		}
	}
}
