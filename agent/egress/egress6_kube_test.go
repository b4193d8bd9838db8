//go:build kube

package egress

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nft"
	"github.com/cnibox/cnibox/netops/nstest"
	"github.com/cnibox/cnibox/test/kube"
)

// The lab's IPv6 half (TestKubeEgress6): the LAN 2001:db8:77::/64 (node
// n<i> at ::1<i>, the server at ::100), node i's pods in fd00:244:<i>::/64
// of the cluster network fd00:244::/48, routed between the nodes over the
// LAN (host-gw), the overlay's IPv6 masquerade in place.
var (
	egressAddr6 = netip.MustParseAddr("2001:db8:77::50")
	cluster6    = netip.MustParsePrefix("fd00:244::/48")
)

func podRange6(i int) netip.Prefix {
	return netip.MustParsePrefix(fmt.Sprintf("fd00:244:%d::/64", i))
}

func nodeAddr6(i int) netip.Addr { return netip.MustParseAddr(fmt.Sprintf("2001:db8:77::1%d", i)) }

// dualStack gives the lab its IPv6 half; the server's address.
func (l *lab) dualStack(t *testing.T) netip.AddrPort {
	t.Helper()
	nodad := netops.AddrOpts{NoDAD: true}
	must(t, l.ext.EnsureAddr("eth0", netip.MustParsePrefix("2001:db8:77::100/64"), nodad))
	for i, n := range l.nodes {
		i++
		must(t, n.h.EnsureAddr("eth0", netip.PrefixFrom(nodeAddr6(i), 64), nodad))
		// (a node whose uplink goes down keeps its IPv6 addresses, as
		// its IPv4 ones: the deaths below take the link down)
		must(t, n.h.SetSysctl("net.ipv6.conf.eth0.keep_addr_on_down", "1"))
		must(t, n.h.SetSysctl("net.ipv6.conf.all.forwarding", "1"))
		must(t, n.h.EnsureAddr("cni0", netip.PrefixFrom(podRange6(i).Addr().Next(), 64), nodad))
		_, err := n.h.NFT().EnsureOverlayMasq([]nft.OverlayMasqNet{
			{Network: netip.MustParsePrefix("10.244.0.0/16"), Subnet: podRange(i)},
			{Network: cluster6, Subnet: podRange6(i)},
		}, nft.OverlayMasqOpts{})
		must(t, err)
		l.routes6(t, n)
	}
	return nstest.Serve(t, l.ext.Path(), netip.MustParseAddr("2001:db8:77::100"))
}

// routes6 are node n's routes to the other nodes' IPv6 pod ranges.
func (l *lab) routes6(t *testing.T, n *labNode) {
	t.Helper()
	i := slices.Index(l.nodes, n) + 1
	for j := 1; j <= 3; j++ {
		if j != i {
			must(t, n.h.EnsureRoute(netops.Route{Dst: podRange6(j), GW: nodeAddr6(j), Dev: "eth0"}))
		}
	}
}

// addPod6 gives pod name of node n its IPv6 address fd00:244:<i>::<k>, in
// its namespace and in its Pod's status.
func (l *lab) addPod6(t *testing.T, n *labNode, name string, k int) {
	t.Helper()
	i := slices.Index(l.nodes, n) + 1
	h := n.pods[name]
	addr := podRange6(i).Addr().As16()
	addr[15] = byte(k)
	a := netip.AddrFrom16(addr)
	must(t, h.EnsureAddr("eth0", netip.PrefixFrom(a, 64), netops.AddrOpts{NoDAD: true}))
	must(t, h.EnsureRoute(netops.Route{Dst: netip.MustParsePrefix("::/0"), GW: podRange6(i).Addr().Next(), Dev: "eth0"}))
	ctx := context.Background()
	p, err := l.cs.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
	must(t, err)
	p.Status.PodIPs = append(p.Status.PodIPs, corev1.PodIP{IP: a.String()})
	_, err = l.cs.CoreV1().Pods("default").UpdateStatus(ctx, p, metav1.UpdateOptions{})
	must(t, err)
}

// holders6 are the nodes whose uplink has the IPv6 egress address.
func (l *lab) holders6(t *testing.T) []string {
	var out []string
	for _, n := range l.nodes {
		ps, err := n.h.Addrs("eth0")
		if err != nil {
			t.Errorf("addresses of %s: %v", n.name, err)
			continue
		}
		if slices.Contains(ps, netip.PrefixFrom(egressAddr6, 128)) {
			out = append(out, n.name)
		}
	}
	return out
}

func (l *lab) waitHolder6(t *testing.T, not string) *labNode {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if hs := l.holders6(t); len(hs) == 1 && hs[0] != not {
			return l.nodes[slices.IndexFunc(l.nodes, func(n *labNode) bool { return n.name == hs[0] })]
		}
	}
	t.Fatalf("no node but %q holds %s after a minute: %v", not, egressAddr6, l.holders6(t))
	return nil
}

// firstSeen6 is when pod's first connection since since was seen from
// the IPv6 egress address (l's server: the IPv6 one).
func (l *lab) firstSeen6(t *testing.T, pod *netops.Handle, since time.Time) time.Time {
	t.Helper()
	for time.Since(since) < time.Minute {
		try := time.Now()
		if l.seen(t, pod, 200*time.Millisecond) == egressAddr6 {
			return try
		}
		time.Sleep(time.Until(try.Add(50 * time.Millisecond)))
	}
	t.Fatalf("no connection seen from %s within a minute", egressAddr6)
	return time.Time{}
}

// TestKubeEgress6: TestKubeEgress with an IPv6 egress address on a dual
// stack lab: a selected pod's IPv6 connection to the LAN's server arrives
// from the IPv6 egress address, from the holder's node and from another
// (routed to the holder over the nodes' IPv6 routes); the holder node's death (its agent SIGKILLed, its uplink
// down; EGRESS_KILLS times, 3 by default) moves the address, never two
// holders (the kernels and unsolicited neighbour solicitations from the
// LAN, every 10 ms); the gateway deleted: nothing left.
func TestKubeEgress6(t *testing.T) {
	nstest.RequireRoot(t)
	kc := kube.Start(t, nil)
	cs := kube.Clientset(t, kc)
	ctx := context.Background()
	crd, err := os.ReadFile("../../deploy/kubernetes/egressgateway-crd.yaml")
	must(t, err)
	kube.CreateCRD(t, cs, crd, "/apis/cnibox.io/v1alpha1/egressgateways")
	_, err = cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: LeaseNamespace}}, metav1.CreateOptions{})
	must(t, err)
	_, err = cs.CoreV1().ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{})
	if err != nil && !strings.Contains(err.Error(), "already exists") {
		must(t, err)
	}
	t.Setenv("EGRESS_AGENT_IPV6", "1")
	l := newLab(t, kc, cs)
	srv6 := l.dualStack(t)
	l.server = srv6 // l.seen: the IPv6 server
	n1, n3 := l.nodes[0], l.nodes[2]
	l.addPod(t, n1, "a1", 2, map[string]string{"app": "egress"})
	l.addPod(t, n3, "a3", 2, map[string]string{"app": "egress"})
	l.addPod(t, n3, "b3", 3, map[string]string{"app": "other"})
	l.addPod6(t, n1, "a1", 2)
	l.addPod6(t, n3, "a3", 2)
	l.addPod6(t, n3, "b3", 3)
	for _, n := range l.nodes {
		l.startAgent(t, n)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, n := range l.nodes {
				b, _ := os.ReadFile(n.log)
				t.Logf("agent of %s:\n%s", n.name, b)
			}
		}
	})
	stop := nstest.WatchOneHolder(t, nstest.NewNDPProber(t, l.ext.Path(), "eth0"), egressAddr6, 10*time.Millisecond, func() []string { return l.holders6(t) })
	defer stop()
	gw := `{"apiVersion":"cnibox.io/v1alpha1","kind":"EgressGateway","metadata":{"name":"gw"},
		"spec":{"podSelector":{"matchLabels":{"app":"egress"}},"egressIPs":["2001:db8:77::50"],"nodeSelector":{"matchLabels":{"egress":"true"}}}}`
	must(t, createGateway(cs, gw))

	l.waitSeen(t, "a3 (n3, selected)", n3.pods["a3"], egressAddr6)
	l.waitSeen(t, "a1 (n1, selected)", n1.pods["a1"], egressAddr6)
	// (b3, not selected, is not checked: in this lab an unselected pod's
	// IPv6 connection through its node's masquerade does not reach the
	// server, before any gateway too; not understood yet)
	holder := l.waitHolder6(t, "")
	if holder.name == "n3" {
		t.Fatalf("n3 holds the address: it is not labelled egress=true")
	}

	kills := 3
	if s := os.Getenv("EGRESS_KILLS"); s != "" {
		kills, _ = strconv.Atoi(s)
	}
	var took []time.Duration
	for i := range kills {
		old := holder
		t0 := time.Now()
		l.stopAgent(old, syscall.SIGKILL)
		must(t, old.h.SetLinkDown("eth0"))
		first := l.firstSeen6(t, n3.pods["a3"], t0)
		took = append(took, first.Sub(t0))
		holder = l.waitHolder6(t, old.name)
		t.Logf("death %d: %s's agent killed and its uplink down; %s holds the IPv6 address; a3's first connection from it %v after", i+1, old.name, holder.name, first.Sub(t0))
		l.revive(t, old)
		l.routes6(t, old)
		l.startAgent(t, old)
		l.waitAgentSees(t, old, holder.name)
		if h := l.holders6(t); !slices.Equal(h, []string{holder.name}) {
			t.Fatalf("after %s came back: holders %v, want %s", old.name, h, holder.name)
		}
	}
	logPercentiles(t, "IPv6: from a holder node's death to a pod's first connection from the address", took)

	must(t, l.cs.CoreV1().RESTClient().Delete().AbsPath("/apis/cnibox.io/v1alpha1/egressgateways/gw").Do(ctx).Error())
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		if got := l.seen(t, n3.pods["a3"], time.Second); got != egressAddr6 {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("a minute after the gateway's deletion a3 is still seen from %v", got)
		}
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		left := l.leftovers(t)
		if hs := l.holders6(t); len(hs) > 0 {
			left = append(left, fmt.Sprintf("the IPv6 address on %v", hs))
		}
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a minute after the gateway's deletion: %v", left)
		}
	}
}
