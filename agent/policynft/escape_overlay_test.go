package policynft_test

import (
	"net/netip"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cnibox/cnibox/agent/policy"
	"github.com/cnibox/cnibox/netops"
)

// The escape suite across the overlay: y/atk is a pod of another node,
// whose packets reach x/victim's node on its VXLAN device, as flannel's
// VXLAN backend carries them (VNI 1, no learning, a static FDB entry per
// peer), and are routed to the bridge: the forward hook of the victim's
// node judges them, routed rather than bridged. The attacker writes its
// frames whole on its node's VXLAN device: whatever a pod there (on a
// node without the policy table, or with its own rules) or the node
// itself sends.

// The attacker's node: its underlay address and pod addresses.
var (
	underlay1, underlay2 = netip.MustParseAddr("192.168.77.1"), netip.MustParseAddr("192.168.77.2")
	remote4, remote6     = netip.MustParseAddr("10.98.0.2"), netip.MustParseAddr("fd00:98::2")
)

// overlay makes the attacker's node beside the lab's (the victim's),
// joins them by an underlay veth and a VXLAN device each, has the lab's
// node route what comes from the overlay (forwarding on, as on every
// node), and tells the engine of y/atk, a pod of the other node.
func (e *escapeLab) overlay(t testing.TB, n *node) {
	l := e.l
	h, path := openNS(t, "pa")
	_, _, err := l.node.EnsureVeth(netops.VethOpts{HostName: "ul0", PeerName: "ul0", Peer: h})
	must(t, err)
	must(t, l.node.EnsureAddr("ul0", netip.PrefixFrom(underlay2, 24), netops.AddrOpts{}))
	must(t, h.EnsureAddr("ul0", netip.PrefixFrom(underlay1, 24), netops.AddrOpts{}))
	must(t, h.SetLinkUp("ul0"))
	vx2, _, err := l.node.EnsureVXLAN(netops.VXLANOpts{Name: "vx0", VNI: 1, Local: underlay2, Dev: "ul0"})
	must(t, err)
	vx1, _, err := h.EnsureVXLAN(netops.VXLANOpts{Name: "vx0", VNI: 1, Local: underlay1, Dev: "ul0"})
	must(t, err)
	must(t, h.EnsureFDB("vx0", vx2.MAC, underlay2))
	must(t, l.node.SetSysctls(netops.SysctlSetting{Key: "net.ipv4.conf.all.forwarding", Value: "1"},
		netops.SysctlSetting{Key: "net.ipv6.conf.all.forwarding", Value: "1"}))
	e.atk = &labPod{ns: "y", name: "atk", path: path, ip: remote4, ip6: remote6}
	e.port, e.dev = "vx0", "vx0"
	e.a = end{ip4: remote4, ip6: remote6, mac: vx1.MAC}
	e.to.mac = vx2.MAC
	n.e.SetPod(policy.PodFromAPI(&corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "y", Name: "atk", Labels: map[string]string{"app": "atk"}},
		Spec:       corev1.PodSpec{NodeName: "n2", Containers: []corev1.Container{{Name: "c"}}},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning, PodIPs: []corev1.PodIP{{IP: remote4.String()}, {IP: remote6.String()}}},
	}))
}
