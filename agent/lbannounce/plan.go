//go:build !nokube

package lbannounce

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/cnibox/cnibox/agent/addrhold"
	"github.com/cnibox/cnibox/agent/lbipam"
)

// Service is a Service as the plan reads it: its load balancer addresses
// (status.loadBalancer.ingress) and whether its externalTrafficPolicy is
// Local, with the nodes that run a ready endpoint of it.
type Service struct {
	Key   string // namespace/name
	IPs   []netip.Addr
	Local bool
	// Ready are the nodes with a ready endpoint (EndpointSlices'
	// endpoints with condition ready and a nodeName).
	Ready []string
}

// Node is a node as the plan reads it: its labels and the uplink networks
// its agent publishes (addrhold.NetworksAnnotation: no agent, no networks,
// never a candidate).
type Node struct {
	Name     string
	Labels   map[string]string
	Networks []netip.Prefix
	// Leaving: being deleted or drained by the autoscaler; it announces
	// nothing more.
	Leaving bool
}

// Inputs are what the plan reads.
type Inputs struct {
	Self     string
	Pools    []lbipam.Announced
	Services []Service
	Nodes    []Node
}

// Address is one load balancer address and who may announce it.
type Address struct {
	IP       netip.Addr
	Pool     string   // the pool that holds it ("" none: not announced)
	Services []string // the Services that hold it, by key, sorted
	Local    bool     // only nodes with a ready endpoint may announce it
	// Candidates are the nodes that may announce it, in rank order (the
	// order in which they take it when it is free).
	Candidates []string
	// Why says why no node may announce it ("" some may).
	Why string
}

// Plan is every address's candidates.
type Plan struct {
	Addresses []Address // by address
}

// Candidates is what the election reads: every announced address (those
// of a pool) with its candidates.
func (p Plan) Candidates() map[netip.Addr][]string {
	out := map[netip.Addr][]string{}
	for _, a := range p.Addresses {
		if a.Pool != "" {
			out[a.IP] = a.Candidates
		}
	}
	return out
}

// Make plans: for each address a Service holds that lies in a pool, the
// nodes that may announce it: those the pool's spec.announce.nodeSelector
// selects, whose uplink network contains the address, not leaving, and,
// when every Service holding it has externalTrafficPolicy Local, that run
// a ready endpoint of each of them (the client's address is kept there, and
// a node without one would drop the traffic). A Service with the policy
// Cluster sharing the address with one with Local (allow-shared-ip) makes
// every eligible node a candidate: its traffic goes anywhere.
func Make(in Inputs) Plan {
	pools := slices.Clone(in.Pools)
	slices.SortFunc(pools, func(a, b lbipam.Announced) int { return strings.Compare(a.Name, b.Name) })
	type use struct {
		svcs      []string
		local     bool // every Service holding it is Local
		ready     []string
		readySeen bool
	}
	uses := map[netip.Addr]*use{}
	for _, s := range in.Services {
		for _, ip := range s.IPs {
			u := uses[ip]
			if u == nil {
				u = &use{local: true}
				uses[ip] = u
			}
			u.svcs = append(u.svcs, s.Key)
			if !s.Local {
				u.local = false
				continue
			}
			if !u.readySeen {
				u.ready, u.readySeen = slices.Clone(s.Ready), true
			} else {
				u.ready = slices.DeleteFunc(u.ready, func(n string) bool { return !slices.Contains(s.Ready, n) })
			}
		}
	}
	var p Plan
	for ip, u := range uses {
		a := Address{IP: ip, Local: u.local}
		a.Services = slices.Compact(slices.Sorted(slices.Values(u.svcs)))
		i := slices.IndexFunc(pools, func(p lbipam.Announced) bool {
			return p.Invalid == "" && slices.ContainsFunc(p.Blocks, func(b lbipam.Block) bool { return b.Contains(ip) })
		})
		if i < 0 {
			a.Why = "in no LoadBalancerIPPool: not cnibox's to announce"
			p.Addresses = append(p.Addresses, a)
			continue
		}
		pool := pools[i]
		a.Pool = pool.Name
		var selected, onNet int
		for _, n := range in.Nodes {
			if n.Leaving || !pool.Nodes.Matches(labels.Set(n.Labels)) {
				continue
			}
			selected++
			if !slices.ContainsFunc(n.Networks, func(p netip.Prefix) bool { return p.Contains(ip) }) {
				continue
			}
			onNet++
			if u.local && !slices.Contains(u.ready, n.Name) {
				continue
			}
			a.Candidates = append(a.Candidates, n.Name)
		}
		addrhold.Rank(ip, a.Candidates)
		switch {
		case len(a.Candidates) > 0:
		case selected == 0:
			a.Why = fmt.Sprintf("pool %s's spec.announce.nodeSelector selects no node (%s)", pool.Name, pool.Nodes)
		case onNet == 0:
			a.Why = fmt.Sprintf("no node that pool %s's spec.announce.nodeSelector selects has it in its uplink network (its agent's annotation %s)", pool.Name, addrhold.NetworksAnnotation)
		default:
			a.Why = "externalTrafficPolicy Local and no node that may announce it runs a ready endpoint"
		}
		p.Addresses = append(p.Addresses, a)
	}
	slices.SortFunc(p.Addresses, func(a, b Address) int { return a.IP.Compare(b.IP) })
	return p
}
