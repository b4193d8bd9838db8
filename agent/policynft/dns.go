package policynft

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/cnibox/cnibox/agent/fqdn"
	"github.com/cnibox/cnibox/internal/policymodel"
	"github.com/cnibox/cnibox/netops/nft"
)

// DNS is the agent's side of the domainNames peers (docs/policy.md,
// "domainNames"): it keeps the DNS table's pod sets to the pods of this
// node that a policy with a domainNames peer selects (their DNS goes
// through the proxy), and answers the proxy's two questions from the
// model: Permit (may the pod talk to that DNS server at all: its egress
// rules, as if the proxy were not there) and Learn (the addresses a pod
// resolved for a name go into the Pairs sets of the peers that name it,
// before the pod has its answer).
type DNS struct {
	mu sync.Mutex // h, pods, resolvers, learned
	h  *nft.Handle
	// pods are the addresses in the DNS table's sets.
	pods map[netip.Addr]bool
	// resolvers are the trusted resolvers in the DNS table's sets (the
	// model's Resolvers when last observed); nil until then.
	resolvers []netip.Addr
	// learned counts, per pod address, the pairs it has learned that
	// have not expired (the cap MaxPairsPerPod).
	learned map[netip.Addr]map[netip.Addr]time.Time
	// permits caches Permit's verdicts (permit.go).
	permits permits

	vmu   sync.Mutex
	model func() *policymodel.Model // the newest model handed over (Syncer.WithDNS)

	// MaxPairs is MaxPairsPerPod unless set (tests).
	MaxPairs int
}

// MaxPairsPerPod bounds what one pod may learn at a time (addresses of
// every name, not expired): a pod that resolves more (a scan, a DNS server
// that floods it with answers) gets SERVFAIL for the rest until some
// expire. 4,096: a busy pod talking to a few hundred hosts with both
// families and a few addresses each stays well under it, and at 100 pods a
// node the Pairs sets stay under half a million elements.
const MaxPairsPerPod = 4096

// NewDNS returns the DNS side on the node namespace at nsPath ("" for the
// caller's).
func NewDNS(nsPath string) (*DNS, error) {
	h, err := nft.Open(nsPath)
	if err != nil {
		return nil, err
	}
	return &DNS{h: h, pods: map[netip.Addr]bool{}, learned: map[netip.Addr]map[netip.Addr]time.Time{}}, nil
}

// Close closes its nftables connection (the DNS table stays).
func (d *DNS) Close() error { return d.h.Close() }

// setModel gives d the Syncer's models.
func (d *DNS) setModel(f func() *policymodel.Model) {
	d.vmu.Lock()
	d.model = f
	d.vmu.Unlock()
}

// current is the newest model handed to the Syncer, kept (it never
// changes): claimed from the Syncer without the watcher's lock, and read
// without any (issue 60, finding 5: Permit evaluated under that lock, for
// seconds with a large policy); nil before any.
func (d *DNS) current() *policymodel.Model {
	d.vmu.Lock()
	f := d.model
	d.vmu.Unlock()
	if f == nil {
		return nil
	}
	return f()
}

// subjects are the addresses of the node's pods that a domainNames peer's
// policy selects.
func subjects(m *policymodel.Model) map[netip.Addr]bool {
	out := map[netip.Addr]bool{}
	for _, dom := range m.Domains {
		s := m.Sets[dom.Subject]
		if s == nil {
			continue
		}
		for _, lp := range m.LocalPods {
			for _, a := range lp.IPs {
				if s.Contains(a) {
					out[a] = true
				}
			}
		}
	}
	return out
}

// observe brings the DNS table's pod sets to m's subjects (called with
// the model's lock held, from the Syncer's Apply: a new pod of a subject is
// in the sets before the change's transaction, so before its ADD returns
// when the ADD admitted it).
func (d *DNS) observe(m *policymodel.Model) error {
	want := subjects(m)
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.resolvers == nil || !slices.Equal(d.resolvers, m.Resolvers) {
		if err := d.h.SetDNSResolvers(m.Resolvers); err != nil {
			return fmt.Errorf("domainNames: the trusted resolvers %v: %w", m.Resolvers, err)
		}
		d.resolvers = append([]netip.Addr{}, m.Resolvers...)
	}
	var add, del []netip.Addr
	for a := range want {
		if !d.pods[a] {
			add = append(add, a)
		}
	}
	for a := range d.pods {
		if !want[a] {
			del = append(del, a)
		}
	}
	if len(add) > 0 {
		if err := d.h.EnsureDNSPods(add); err != nil {
			return fmt.Errorf("domainNames: put %v's DNS through the proxy: %w", add, err)
		}
	}
	if len(del) > 0 {
		if err := d.h.DeleteDNSPods(del); err != nil {
			return fmt.Errorf("domainNames: take %v's DNS off the proxy: %w", del, err)
		}
	}
	for _, a := range add {
		d.pods[a] = true
	}
	for _, a := range del {
		delete(d.pods, a)
		delete(d.learned, a)
		d.permits.forget(a)
	}
	return nil
}

// Permit answers the proxy (fqdn.Config.Permit): pod, one of this node's
// pods in the DNS sets, may talk to server over proto when server is a
// trusted resolver (the table diverts no other: a query to another one
// reached the proxy through a table older than the model) and its egress
// rules allow it, as the kernel would without the proxy. The evaluation
// is made on the watcher's model without its lock (current), one at a
// time per pod, and cached per model generation (permit.go).
func (d *DNS) Permit(pod netip.Addr, server netip.AddrPort, proto policymodel.Protocol) bool {
	pod, server = pod.Unmap(), netip.AddrPortFrom(server.Addr().Unmap(), server.Port())
	d.mu.Lock()
	ours := d.pods[pod]
	trusted := slices.Contains(d.resolvers, server.Addr())
	d.mu.Unlock()
	if !ours || !trusted {
		return false // not a pod the table sends here, or not a resolver the operator trusts
	}
	m := d.current()
	if m == nil {
		return false
	}
	return d.permits.allowed(m, permitKey{pod: pod, server: server, proto: proto})
}

// errTooMany is Learn's refusal past MaxPairsPerPod.
var errTooMany = errors.New("the pod has learned as many addresses as it may at a time")

// Learn answers the proxy (fqdn.Config.Learn): the addresses pod resolved
// for names (the query's name and its CNAME chain) go, for their TTLs,
// into the Pairs set of every domainNames peer whose names match one of
// them and whose policy selects the pod, each paired with the pod's own
// address of the same family (a pod asks for AAAA over IPv4, and
// connects from its IPv6 address). One transaction per set; it returns
// once they are in the kernel.
func (d *DNS) Learn(pod netip.Addr, names []string, addrs []fqdn.LearnedAddr) error {
	pod = pod.Unmap()
	type target struct {
		set  policymodel.SetID
		self []netip.Addr // the pod's addresses
	}
	var targets []target
	if m := d.current(); m != nil {
		var self []netip.Addr
		for _, lp := range m.LocalPods {
			if slices.Contains(lp.IPs, pod) {
				self = lp.IPs
			}
		}
		for _, dom := range m.Domains {
			s := m.Sets[dom.Subject]
			if s == nil || !s.Contains(pod) || !namesMatch(dom.Names, names) {
				continue
			}
			if !slices.ContainsFunc(targets, func(t target) bool { return t.set == dom.Set }) {
				targets = append(targets, target{set: dom.Set, self: self})
			}
		}
	}
	if len(targets) == 0 {
		return nil // no peer names it: the answer goes as it is
	}
	now := time.Now()
	d.mu.Lock()
	defer d.mu.Unlock()
	seen := d.learned[pod]
	if seen == nil {
		seen = map[netip.Addr]time.Time{}
		d.learned[pod] = seen
	}
	for a, until := range seen {
		if now.After(until) {
			delete(seen, a)
		}
	}
	for _, t := range targets {
		var pairs []nft.PolicyPair
		for _, la := range addrs {
			dst := la.Addr.Unmap()
			i := slices.IndexFunc(t.self, func(a netip.Addr) bool { return a.Is6() == dst.Is6() })
			if i < 0 {
				continue // the pod has no address of that family
			}
			if _, ok := seen[dst]; !ok && len(seen) >= d.maxPairs() {
				return fmt.Errorf("domainNames: pod %s: %w (%d)", pod, errTooMany, d.maxPairs())
			}
			until := now.Add(la.TTL)
			if until.After(seen[dst]) {
				seen[dst] = until
			}
			pairs = append(pairs, nft.PolicyPair{Pod: t.self[i], Dst: dst, TTL: la.TTL})
		}
		if len(pairs) == 0 {
			continue
		}
		if err := d.h.LearnPolicyPairs(t.set, pairs); err != nil {
			return fmt.Errorf("domainNames: pod %s: %w", pod, err)
		}
	}
	return nil
}

// namesMatch reports whether one of patterns (a peer's names, as the
// model keeps them) matches one of names.
func namesMatch(patterns, names []string) bool {
	ps := make([]fqdn.Pattern, 0, len(patterns))
	for _, p := range patterns {
		if pp, err := fqdn.ParsePattern(p); err == nil {
			ps = append(ps, pp)
		}
	}
	return fqdn.MatchAny(ps, names)
}

func (d *DNS) maxPairs() int {
	if d.MaxPairs > 0 {
		return d.MaxPairs
	}
	return MaxPairsPerPod
}
