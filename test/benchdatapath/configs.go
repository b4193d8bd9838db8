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
	// proxy is who serves the Services of a configuration that measures
	// through them (services.go): cniboxProxy (the agent's
	// --service-proxy) or kubeProxy (kube-proxy v1.34.2 in nftables mode
	// on each node); "" measures pod to pod.
	proxy string
}

// The Services proxies of the configurations that measure through a
// ClusterIP and a NodePort.
const (
	cniboxProxy = "cnibox"
	kubeProxy   = "kube-proxy"
)

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
	// Through a Service (issue 63 item 3, issue 65 item 1's last part):
	// cnibox's proxy, kube-proxy on cnibox's overlay (the proxy alone
	// differs), kube-proxy beside flanneld (what an operator runs).
	{name: "cnibox-vxlan-services", title: "cnibox + its Services proxy, vxlan", kind: cniboxKind, backend: "vxlan", proxy: cniboxProxy},
	{name: "cnibox-vxlan-kube-proxy", title: "cnibox + kube-proxy (nftables), vxlan", kind: cniboxKind, backend: "vxlan", proxy: kubeProxy},
	{name: "flannel-vxlan-kube-proxy", title: "flanneld + reference plugins + kube-proxy (nftables), vxlan", kind: flannelKind, backend: "vxlan", proxy: kubeProxy},
	{name: "cnibox-host-gw-services", title: "cnibox + its Services proxy, host-gw", kind: cniboxKind, backend: "host-gw", proxy: cniboxProxy},
	{name: "cnibox-host-gw-kube-proxy", title: "cnibox + kube-proxy (nftables), host-gw", kind: cniboxKind, backend: "host-gw", proxy: kubeProxy},
	{name: "flannel-host-gw-kube-proxy", title: "flanneld + reference plugins + kube-proxy (nftables), host-gw", kind: flannelKind, backend: "host-gw", proxy: kubeProxy},
}

// podConfigs are the configurations that measure pod to pod.
func podConfigs() []string {
	var out []string
	for _, c := range configs {
		if c.proxy == "" {
			out = append(out, c.name)
		}
	}
	return out
}

// serviceConfigs are the configurations that measure through a Service.
func serviceConfigs() []string {
	var out []string
	for _, c := range configs {
		if c.proxy != "" {
			out = append(out, c.name)
		}
	}
	return out
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

// needsKubeProxy reports whether any of the named configurations runs
// kube-proxy.
func needsKubeProxy(names []string) bool {
	return slices.ContainsFunc(names, func(n string) bool { return configByName(n).proxy == kubeProxy })
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

// The pairs of a configuration that measures through a Service: pod a
// to a ClusterIP whose one endpoint is pod b (same node) or pod c (the
// other node, across the overlay), and a client off the cluster (a
// namespace on the underlay) to node 0's address at a NodePort whose one
// endpoint is pod b on that node (same node) or pod c on the other
// (across the overlay, masqueraded).
const (
	sameNodeClusterIP  = "same-node, ClusterIP"
	crossNodeClusterIP = "cross-node, ClusterIP"
	sameNodeNodePort   = "same-node, NodePort"
	crossNodeNodePort  = "cross-node, NodePort"
)

var pairKinds = []string{sameNode, crossNode, sameNodeClusterIP, crossNodeClusterIP, sameNodeNodePort, crossNodeNodePort}

// throughService reports whether pair kind pk goes through a Service.
func throughService(pk string) bool { return pk != sameNode && pk != crossNode }

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
