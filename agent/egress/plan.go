package egress

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/cnibox/cnibox/agent/addrhold"
	"github.com/cnibox/cnibox/agent/cluster"
	"k8s.io/apimachinery/pkg/labels"
)

// Gateway is an EgressGateway as the plan reads it: selectors compiled,
// addresses parsed (Read does both and names what it cannot read).
type Gateway struct {
	Name              string
	PodSelector       labels.Selector
	NamespaceSelector labels.Selector
	NodeSelector      labels.Selector
	IPs               []netip.Addr
	Destinations      []netip.Prefix
	// Invalid names the fields the plan cannot use (the CRD's schema
	// refuses them; an object written before it or around it may hold
	// them): such a gateway selects no pods.
	Invalid []string
}

// Pod is the agent's pod (agent/cluster); the plan reads its namespace,
// name, node, labels and addresses (readPod keeps those only, and leaves
// out hostNetwork pods, finished ones and those without one).
type Pod = cluster.Pod

// Node is a node as the plan reads it: its labels, the networks of its
// uplink its agent publishes (annotation NetworksAnnotation: no agent, no
// networks, never eligible) and its pod ranges.
type Node struct {
	Name     string
	Labels   map[string]string
	Networks []netip.Prefix
}

// Inputs are what one node plans from.
type Inputs struct {
	Self       string
	Gateways   []Gateway
	Pods       []Pod
	Namespaces map[string]map[string]string // labels by name
	Nodes      map[string]Node
	// Holders is each address's holder, from its Lease ("" or absent:
	// none).
	Holders map[netip.Addr]string
	// Cluster are the networks traffic to which never goes through a
	// gateway: the cluster's pod networks (and the service range when
	// known). An egress address inside them is refused.
	Cluster []netip.Prefix
}

// Use is one gateway's use of one of its addresses.
type Use struct {
	Gateway      string
	IP           netip.Addr
	Holder       string         // "" none
	Destinations []netip.Prefix // of IP's family; empty: everything outside the cluster
	Pods         []netip.Addr   // the addresses of every pod that leaves from IP (pods of any node)
	Local        []netip.Addr   // this node's of them
	LocalPods    []string       // their "namespace/name"
}

// Condition is a gateway's Ready condition.
type Condition struct {
	Ready           bool
	Reason, Message string
}

// Plan is what one node programs and reports.
type Plan struct {
	Uses []Use
	// Eligible: the addresses this node may hold, each with its rank
	// among the nodes that may (0 first: the order in which free
	// addresses are taken, so that several spread over the nodes).
	Eligible map[netip.Addr]int
	// Candidates are, per address, the nodes that may hold it in rank
	// order.
	Candidates map[netip.Addr][]string
	// Conditions of every gateway, by name; Reporter: this node writes
	// them (the first, by name, of the nodes whose agents publish their
	// networks).
	Conditions map[string]Condition
	Reporter   bool
}

// IPs are the addresses of every gateway, each once, in order.
func (p Plan) IPs() []netip.Addr {
	var out []netip.Addr
	for _, u := range p.Uses {
		out = append(out, u.IP)
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return slices.Compact(out)
}

// Make plans in's node.
func Make(in Inputs) Plan {
	p := Plan{Eligible: map[netip.Addr]int{}, Candidates: map[netip.Addr][]string{}, Conditions: map[string]Condition{}}
	gws := slices.Clone(in.Gateways)
	slices.SortFunc(gws, func(a, b Gateway) int { return strings.Compare(a.Name, b.Name) })
	uses := map[string]*Use{} // by gateway/IP
	key := func(g string, ip netip.Addr) string { return g + "/" + ip.String() }
	for _, g := range gws {
		for _, ip := range g.IPs {
			uses[key(g.Name, ip)] = &Use{Gateway: g.Name, IP: ip, Holder: in.Holders[ip], Destinations: sameFamily(g.Destinations, ip)}
		}
	}
	// Each pod leaves by the first gateway (by name) that selects it, each
	// of its addresses from one of the gateway's held addresses of its
	// family picked by rendezvous hashing (losing one address moves only
	// its own pods; a family the gateway holds no address of leaves as
	// without a gateway).
	for _, pod := range in.Pods {
		for _, g := range gws {
			if len(g.Invalid) > 0 || !g.selects(pod, in.Namespaces[pod.Namespace]) {
				continue
			}
			for _, a := range pod.IPs {
				var held []netip.Addr
				for _, ip := range g.IPs {
					if in.Holders[ip] != "" && ip.Is6() == a.Is6() {
						held = append(held, ip)
					}
				}
				if len(held) > 0 {
					u := uses[key(g.Name, rendezvous(held, a.String()))]
					u.Pods = append(u.Pods, a)
					if pod.Node == in.Self {
						u.Local = append(u.Local, a)
						u.LocalPods = append(u.LocalPods, pod.Namespace+"/"+pod.Name)
					}
				}
			}
			break
		}
	}
	for _, g := range gws {
		for _, ip := range g.IPs {
			u := uses[key(g.Name, ip)]
			slices.SortFunc(u.Pods, netip.Addr.Compare)
			u.Pods = slices.Compact(u.Pods)
			slices.SortFunc(u.Local, netip.Addr.Compare)
			u.Local = slices.Compact(u.Local)
			slices.Sort(u.LocalPods)
			u.LocalPods = slices.Compact(u.LocalPods)
			p.Uses = append(p.Uses, *u)
		}
	}
	// Eligibility and rank of this node for each address.
	eligible := map[netip.Addr][]string{}
	for _, g := range gws {
		if len(g.Invalid) > 0 {
			continue
		}
		for _, ip := range g.IPs {
			for _, n := range in.Nodes {
				if n.canHold(g, ip) && !slices.Contains(eligible[ip], n.Name) {
					eligible[ip] = append(eligible[ip], n.Name)
				}
			}
		}
	}
	for ip, nodes := range eligible {
		addrhold.Rank(ip, nodes)
		p.Candidates[ip] = nodes
		if i := slices.Index(nodes, in.Self); i >= 0 {
			p.Eligible[ip] = i
		}
	}
	// Conditions, written by one node.
	var agents []string
	for _, n := range in.Nodes {
		if len(n.Networks) > 0 {
			agents = append(agents, n.Name)
		}
	}
	p.Reporter = len(agents) > 0 && slices.Min(agents) == in.Self
	for _, g := range gws {
		p.Conditions[g.Name] = condition(g, in, eligible)
	}
	return p
}

// condition is g's Ready condition: true when every address has a holder.
func condition(g Gateway, in Inputs, eligible map[netip.Addr][]string) Condition {
	if len(g.Invalid) > 0 {
		return Condition{Reason: "InvalidSpec", Message: "cannot use " + strings.Join(g.Invalid, "; ")}
	}
	var held, missing []string
	reason := "NotHeld"
	for i, ip := range g.IPs {
		switch h := in.Holders[ip]; {
		case h != "":
			held = append(held, fmt.Sprintf("%s on node %s", ip, h))
		case len(eligible[ip]) == 0:
			reason = "NoEligibleNode"
			missing = append(missing, fmt.Sprintf("spec.egressIPs[%d] %s: no node that spec.nodeSelector selects has it in its network (its agent's annotation %s)", i, ip, NetworksAnnotation))
		default:
			missing = append(missing, fmt.Sprintf("spec.egressIPs[%d] %s: no holder yet (may hold it: %s)", i, ip, strings.Join(eligible[ip], ", ")))
		}
	}
	if len(missing) == 0 {
		return Condition{Ready: true, Reason: "Held", Message: strings.Join(held, "; ")}
	}
	return Condition{Reason: reason, Message: strings.Join(append(missing, held...), "; ")}
}

// NetworksAnnotation is the Node annotation in which each agent publishes
// the IPv4 and IPv6 networks of its node's uplink: the networks an egress address
// may be held on.
const NetworksAnnotation = cluster.EgressNetworksAnnotation

func (g Gateway) selects(p Pod, nsLabels map[string]string) bool {
	return g.NamespaceSelector.Matches(labels.Set(nsLabels)) && g.PodSelector.Matches(labels.Set(p.Labels))
}

// canHold reports whether n may hold ip for g: g selects it and ip is on
// one of its networks.
func (n Node) canHold(g Gateway, ip netip.Addr) bool {
	if !g.NodeSelector.Matches(labels.Set(n.Labels)) {
		return false
	}
	return slices.ContainsFunc(n.Networks, func(p netip.Prefix) bool { return p.Contains(ip) })
}

// sameFamily are the prefixes of ps of ip's family.
func sameFamily(ps []netip.Prefix, ip netip.Addr) []netip.Prefix {
	var out []netip.Prefix
	for _, p := range ps {
		if p.Addr().Is6() == ip.Is6() {
			out = append(out, p)
		}
	}
	return out
}

// rendezvous picks the address of ips for key: the one of the highest
// weight.
func rendezvous(ips []netip.Addr, key string) netip.Addr {
	return slices.MaxFunc(ips, func(a, b netip.Addr) int {
		return cmp.Or(cmp.Compare(addrhold.Weight(a.String(), key), addrhold.Weight(b.String(), key)), a.Compare(b))
	})
}
