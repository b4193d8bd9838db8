package podapi

import (
	"fmt"
	"strings"
)

// The allowlist's rules against a pod that captures or forges another
// address's traffic (issue 48): a NAD of an untrusted namespace may not
// put a device on the pod's own interface into the node (eth0, a veth
// whose peer is the node's bridge port), keep that interface's MAC
// (macvlan passthru), choose a MAC, or make the pod route for others
// (forwarding and proxy sysctls). docs/security.md, "Fields".

// podPrimaryIf is the pod's primary interface in Kubernetes (the
// kubelet's CNI_IFNAME): a veth into the node's bridge under every
// primary CNI that cnibox runs beside.
const podPrimaryIf = "eth0"

// refuseMAC is why "mac" (a field, args.cni's, a capability) is refused.
const refuseMAC = "chooses the MAC of a device of the pod: with a device that reaches the node's fabric it takes another endpoint's MAC " +
	"(let the kernel pick one, or put the network in a trusted namespace)"

// checkInPodMaster refuses a lower device (macvlan, ipvlan, vlan) with
// linkInContainer that names no master, or the pod's primary interface:
// with no master the role takes the interface of the pod's default route,
// eth0, a veth whose peer is the node's bridge port, and the device's
// frames (and addresses) then go out of the pod as the pod's own. The
// role checks at ADD that a named master is no such veth either
// (roles/internal/lower, vethMaster).
func checkInPodMaster(n *jsonNode, path, linkKey string) error {
	m, mk := n.get(fold("master"))
	if m == nil {
		return &refusal{join(path, linkKey), fmt.Sprintf("is true without a \"master\": the device then goes on the pod's default route interface, %s, "+
			"the veth into the node: name the interface in the pod it goes on (one that does not lead out of the pod, such as a dummy's)", podPrimaryIf)}
	}
	if !m.isStr || m.str == "" || m.str == podPrimaryIf {
		return &refusal{join(path, mk), fmt.Sprintf("is not an interface of the pod's own (%s is the veth into the node, and a device on it sends into the node as the pod): "+
			"name an interface that does not lead out of the pod", podPrimaryIf)}
	}
	return nil
}

// notPassthru takes a macvlan mode other than passthru.
func notPassthru(n *jsonNode, path string) error {
	if err := leaf(n, path); err != nil {
		return err
	}
	if n.isStr && strings.EqualFold(strings.TrimSpace(n.str), "passthru") {
		return &refusal{path, "is passthru: the device takes over its master and keeps the master's MAC, the pod's address on the node's fabric: use bridge, private or vepa"}
	}
	return nil
}

// capabilitiesShape takes capabilities as anyKeys does, except "mac" (the
// pod would choose the MAC that refuseMAC refuses in the config).
func capabilitiesShape(n *jsonNode, path string) error {
	if err := anyKeys(n, path); err != nil {
		return err
	}
	for _, k := range n.keys {
		if strings.EqualFold(k, "mac") {
			return &refusal{join(path, k), "lets the pod's selection choose the MAC of the device (the mac capability): " + refuseMAC}
		}
	}
	return nil
}

// sysctlShape takes a sysctl map (tuning's, args.cni's) whose names do not
// make the pod route or answer for others.
func sysctlShape(n *jsonNode, path string) error {
	if err := anyKeys(n, path); err != nil {
		return err
	}
	for _, k := range n.keys {
		if forwardingSysctl(k) {
			return &refusal{join(path, k), "makes the pod forward, or answer ARP/ND, for other addresses: packets of others' addresses leave the pod as its own " +
				"(routers and proxies need a network of a trusted namespace)"}
		}
	}
	return nil
}

// forwardingSysctls are the last parts of the per-interface sysctls
// (net.ipv4.conf.<if>.*, net.ipv6.conf.<if>.*) that make a namespace
// route, or answer for, others' addresses.
var forwardingSysctls = map[string]bool{
	"forwarding":      true,
	"mc_forwarding":   true,
	"bc_forwarding":   true,
	"proxy_arp":       true,
	"proxy_arp_pvlan": true,
	"proxy_ndp":       true,
	"route_localnet":  true,
}

// forwardingSysctl reports whether the sysctl name (tuning's dotted form,
// IFNAME standing for the interface) makes the pod route for others:
// net.ipv4.ip_forward, and net.ipv4/ipv6.conf.<any interface>.forwarding
// and its kin (forwardingSysctls). Case and surrounding space are ignored
// (tuning refuses such names anyway), and so is a dotted interface name
// (eth0.100) between conf and the last part.
func forwardingSysctl(name string) bool {
	s := strings.ToLower(strings.TrimSpace(name))
	if s == "net.ipv4.ip_forward" || s == "net.ipv6.ip_forward" {
		return true
	}
	if !strings.HasPrefix(s, "net.ipv4.conf.") && !strings.HasPrefix(s, "net.ipv6.conf.") {
		return false
	}
	return forwardingSysctls[s[strings.LastIndexByte(s, '.')+1:]]
}
