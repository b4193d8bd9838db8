package main

import "slices"

// kind is who builds a configuration's path.
type kind int

const (
	floorKind   kind = iota // no CNI: a bare veth pair, the underlay
	flannelKind             // flanneld + the reference plugins
	cniboxKind              // cnibox-agent-kube + cnibox's roles
)

// config is one configuration of the table.
type config struct {
	name     string // as -configs names it
	title    string // its rows' name in the tables
	kind     kind
	backend  string // net-conf.json's Backend.Type
	policies bool   // -policies NetworkPolicies selecting the pods, flow log (deny) for their namespace
	// kubeRouter runs kube-router's policy controller beside flanneld on
	// each node (the policy anchor: flannel plus kube-router, as k3s runs
	// them).
	kubeRouter bool
}

var configs = []config{
	{name: "floor", title: "floor", kind: floorKind},
	{name: "flannel-vxlan", title: "flanneld + reference plugins, vxlan", kind: flannelKind, backend: "vxlan"},
	{name: "flannel-host-gw", title: "flanneld + reference plugins, host-gw", kind: flannelKind, backend: "host-gw"},
	{name: "cnibox-vxlan", title: "cnibox, vxlan", kind: cniboxKind, backend: "vxlan"},
	{name: "cnibox-host-gw", title: "cnibox, host-gw", kind: cniboxKind, backend: "host-gw"},
	{name: "cnibox-vxlan-policies", title: "cnibox, vxlan, policies + flow log (deny)", kind: cniboxKind, backend: "vxlan", policies: true},
	{name: "cnibox-host-gw-policies", title: "cnibox, host-gw, policies + flow log (deny)", kind: cniboxKind, backend: "host-gw", policies: true},
	{name: "flannel-vxlan-kube-router", title: "flanneld + reference plugins + kube-router, vxlan, policies", kind: flannelKind, backend: "vxlan", policies: true, kubeRouter: true},
	{name: "flannel-host-gw-kube-router", title: "flanneld + reference plugins + kube-router, host-gw, policies", kind: flannelKind, backend: "host-gw", policies: true, kubeRouter: true},
}

// refPlugins are the reference plugins flannel's conflist runs (the
// flannel plugin itself comes with flanneld).
var refPlugins = []string{"bridge", "host-local", "portmap"}

// The policy anchor's row that flanneld + kube-router with the NFQUEUE
// controller would be, kube-network-policies v1.1 (flannel's own
// netpol.enabled), is not here: it queues each new connection to user space
// with nftables' queue expression, which this kernel lacks (CONFIG_NFT_QUEUE
// is off: adding a rule with `queue` fails with ENOENT).

func configNames() []string {
	var out []string
	for _, c := range configs {
		out = append(out, c.name)
	}
	return out
}

func configByName(name string) config {
	i := slices.IndexFunc(configs, func(c config) bool { return c.name == name })
	return configs[i]
}

// needsKubeRouter reports whether any of the named configurations runs
// kube-router.
func needsKubeRouter(names []string) bool {
	return slices.ContainsFunc(names, func(n string) bool { return configByName(n).kubeRouter })
}

// needsAnchor reports whether any of the named configurations runs
// flanneld.
func needsAnchor(names []string) bool {
	for _, n := range names {
		if configByName(n).kind == flannelKind {
			return true
		}
	}
	return false
}

// The pairs measured in each configuration.
const (
	sameNode  = "same-node"
	crossNode = "cross-node"
)

var pairKinds = []string{sameNode, crossNode}

// rowTitle is the name of a configuration's row for a pair kind; the
// floor's two rows are two different paths.
func rowTitle(c config, pk string) string {
	if c.kind == floorKind {
		if pk == sameNode {
			return "floor: bare veth pair"
		}
		return "floor: plain underlay, node to node"
	}
	return c.title
}
