//go:build kube

package overlay

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/cnibox/cnibox/agent/lbannounce"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nstest"
	"github.com/cnibox/cnibox/test/kube"
)

// lb6IP is TestKubeLBAnnounceIPv6Only's LoadBalancer address, in the
// underlay's IPv6 network (egress6_kube_test.go's cluster) and in the pool
// v6 (2001:db8:77::200-20f, announced by the nodes labelled lb=true).
var lb6IP = netip.MustParseAddr("2001:db8:77::200")

// lbHolders are the nodes whose uplink holds a.
func lbHolders(t *testing.T, c *cluster, a netip.Addr) []string {
	var out []string
	for _, n := range c.nodes {
		h, err := netops.Open(n.ns)
		if err != nil {
			t.Errorf("%s: %v", n.name, err)
			continue
		}
		ps, err := h.Addrs("eth0")
		h.Close()
		if err == nil && slices.Contains(ps, netip.PrefixFrom(a, a.BitLen())) {
			out = append(out, n.name)
		}
	}
	return out
}

// waitLBHolder waits (a minute at most) until one node other than not,
// one of among, holds a, and the client on the underlay reaches that
// node's own server at a (its answer names the node); it returns the node.
func waitLBHolder(t *testing.T, c *cluster, a netip.Addr, not string, among ...string) *node {
	t.Helper()
	var hs []string
	var got string
	var err error
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if hs = lbHolders(t, c, a); len(hs) != 1 || hs[0] == not || !slices.Contains(among, hs[0]) {
			continue
		}
		if got, err = askTCP(t, c.underlay, netip.AddrPortFrom(a, 8080)); err == nil && strings.HasPrefix(got, hs[0]+" ") {
			return c.nodes[slices.IndexFunc(c.nodes, func(n *node) bool { return n.name == hs[0] })]
		}
	}
	t.Fatalf("after a minute: %s held by %v, the client's connection to it answered %q (%v); want one of %v but %q, answering",
		a, hs, got, err, among, not)
	return nil
}

// waitLBService waits (a minute at most) until the client on the
// underlay reaches the pod web through the Service's port 80 at the
// address, held by holder: the holder's services table DNATs it to the
// pod on node3 over vxlan's IPv6 overlay, masqueraded (Cluster) to an
// address of the holder's.
func waitLBService(t *testing.T, c *cluster, holder *node, web *pod) {
	t.Helper()
	h := openH(t, holder.ns)
	var got string
	var err error
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if got, err = askTCP(t, c.underlay, netip.AddrPortFrom(lb6IP, 80)); err != nil {
			continue
		}
		from, ok := strings.CutPrefix(got, "web ")
		a, perr := netip.ParseAddr(from)
		if !ok || perr != nil {
			continue
		}
		if ps, _ := h.Addrs(""); slices.ContainsFunc(ps, func(p netip.Prefix) bool { return p.Addr() == a }) {
			return
		}
	}
	t.Fatalf("the client's connection to [%s]:80: %q (%v); want pod web's answer, seeing an address of %s's (the announcer, masqueraded)\n%s",
		lb6IP, got, err, holder.name, netDump(holder.ns, c.nodes[2].ns, web.ns))
}

// TestKubeLBAnnounceIPv6Only: the LoadBalancer announcer on a single-stack
// IPv6 cluster (net-conf.json with EnableIPv4 false, issue 64), the agents
// the real binary with --kube-subnet-mgr --lb-announce over vxlan on
// IPv6: a Service's IPv6 address of a pool whose nodeSelector picks node1
// and node2 is held by one of them on its uplink, never node3, and the
// client on the underlay reaches that node at it; at every instant at
// most one node holds it and one MAC answers a neighbour solicitation for
// it from the underlay (every 10 ms throughout). With the Services proxy
// beside it (--service-proxy), the client reaches a pod on node3 through
// the single-stack IPv6 Service's port 80 at the address, masqueraded to
// the holder's address, before and after the failover. A LAN host that resolved
// it follows the holder's death (its agent SIGKILLed, its uplink down) to
// the other node by that node's unsolicited neighbour advertisement, and
// the client reaches the new holder. The Service deleted: no node holds
// it. (Before the fix the agent started the announcer only with
// EnableIPv4: nothing held the address.)
func TestKubeLBAnnounceIPv6Only(t *testing.T) {
	c := newCluster(t, 3)
	c.v6Only = true
	c.kcpArgs = []string{"fd00:10:244::/56", "64"}
	c.flannelConf() // (the manifest's conflist: the pods' default route via their bridge)
	ul := openH(t, c.underlay)
	nodad := netops.AddrOpts{NoDAD: true}
	must(t, ul.EnsureAddr("br0", netip.MustParsePrefix("2001:db8:77::1/64"), nodad))
	must(t, ul.EnsureAddr("br0", netip.MustParsePrefix("2001:db8:77::100/64"), nodad))
	for i, n := range c.nodes {
		h := openH(t, n.ns)
		must(t, h.EnsureAddr("eth0", netip.PrefixFrom(underlay6(i+1), 64), nodad))
		// (an IPv6 node forwards, as kubeadm requires: the agent reads
		// IPv6 forwarding and never sets it)
		must(t, h.SetSysctl("net.ipv6.conf.all.forwarding", "1"))
		// each node's own server: the client's connection to the
		// address says which node's kernel took it
		serveName(t, n.ns, netip.AddrPortFrom(netip.IPv6Unspecified(), 8080), n.name)
	}

	// (an IPv6 Service range beside the IPv4 one the API server's own
	// Service needs: the Service is single-stack IPv6)
	cs, nodeCfg := c.startControlPlane("KCP_SERVICE_CIDR=10.96.0.0/16,fd00:96::/108")
	netConf := filepath.Join(t.TempDir(), "net-conf.json")
	must(t, os.WriteFile(netConf, []byte(v6OnlyNetConf), 0o644))
	c.agentArgs = func(n *node) []string {
		return []string{"--kube-subnet-mgr", "--kubeconfig-file", nodeCfg, "--net-config-path", netConf, "--node-name", n.name, "--lb-announce", "--service-proxy"}
	}
	ctx := context.Background()
	crd, err := os.ReadFile("../../deploy/kubernetes/loadbalancerippool-crd.yaml")
	must(t, err)
	kube.CreateCRD(t, cs, crd, "/apis/cnibox.io/v1alpha1/loadbalancerippools")
	_, err = cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: lbannounce.LeaseNamespace}}, metav1.CreateOptions{})
	must(t, err)
	pool := `{"apiVersion":"cnibox.io/v1alpha1","kind":"LoadBalancerIPPool","metadata":{"name":"v6"},"spec":{"blocks":[{"start":"2001:db8:77::200","stop":"2001:db8:77::20f"}],"announce":{"nodeSelector":{"matchLabels":{"lb":"true"}}}}}`
	must(t, cs.CoreV1().RESTClient().Post().AbsPath("/apis/cnibox.io/v1alpha1/loadbalancerippools").Body([]byte(pool)).SetHeader("Content-Type", "application/json").Do(ctx).Error())
	for i, n := range c.nodes {
		_, err := cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.name,
			Labels: map[string]string{"lb": fmt.Sprint(i < 2)}}}, metav1.CreateOptions{})
		must(t, err)
	}
	for _, n := range c.nodes {
		n.startAgent()
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, n := range c.nodes {
				t.Logf("agent log of %s:\n%s", n.name, n.log())
			}
		}
	})
	for _, n := range c.nodes {
		eventually(t, n.name+"'s IPv6-only overlay ready", func() string {
			s, ok := n.stateOf("flannel-v6.1")
			if ok && s.Ready && s.Lease.Subnet6.IsValid() && !s.Lease.Subnet.IsValid() {
				return ""
			}
			return fmt.Sprintf("store: %+v (found %v)", s, ok)
		})
	}

	// The Service's endpoint: a pod on node3 (not a candidate), with an
	// IPv6 address only.
	web, err := c.nodes[2].addPod("web")
	if err != nil {
		t.Fatalf("ADD web on node3: %v\nagent log:\n%s", err, c.nodes[2].log())
	}
	if web.ip.IsValid() || !web.ip6.IsValid() {
		t.Fatalf("web: ADD gave %v and %v; want an IPv6 address alone", web.ip, web.ip6)
	}
	serveName(t, web.ns, netip.AddrPortFrom(web.ip6, 8080), "web")
	node3 := "node3"
	_, err = cs.DiscoveryV1().EndpointSlices("default").Create(ctx, &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "web6-1", Labels: map[string]string{discoveryv1.LabelServiceName: "web6"}},
		AddressType: discoveryv1.AddressTypeIPv6,
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{web.ip6.String()}, NodeName: &node3,
			Conditions: discoveryv1.EndpointConditions{Ready: ptr(true)}}},
		Ports: []discoveryv1.EndpointPort{{Name: ptr(""), Port: ptr(int32(8080)), Protocol: ptr(corev1.ProtocolTCP)}},
	}, metav1.CreateOptions{})
	must(t, err)

	stop := nstest.WatchOneHolder(t, nstest.NewNDPProber(t, c.underlay, "br0"), lb6IP, 10*time.Millisecond, func() []string { return lbHolders(t, c, lb6IP) })
	defer stop()
	// A Service of type LoadBalancer, single-stack IPv6, holding the
	// address (the IPAM's write, agent/lbipam, done here by hand).
	s, err := cs.CoreV1().Services("default").Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web6"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Selector: map[string]string{"app": "web6"},
			IPFamilies: []corev1.IPFamily{corev1.IPv6Protocol}, IPFamilyPolicy: ptr(corev1.IPFamilyPolicySingleStack),
			Ports: []corev1.ServicePort{{Port: 80, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(8080)}}}}, metav1.CreateOptions{})
	must(t, err)
	s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: lb6IP.String()}}
	_, err = cs.CoreV1().Services("default").UpdateStatus(ctx, s, metav1.UpdateOptions{})
	must(t, err)
	holder := waitLBHolder(t, c, lb6IP, "", "node1", "node2")
	waitLBService(t, c, holder, web)

	// A host of the LAN (the test's own namespace, on the underlay's
	// bridge) resolves the address to the holder's MAC.
	self := openH(t, "")
	must(t, self.EnsureAddr("ul0", netip.MustParsePrefix("2001:db8:77::254/64"), nodad))
	conn, err := net.DialTimeout("tcp", netip.AddrPortFrom(lb6IP, 8080).String(), 2*time.Second)
	must(t, err)
	got, err := readAnswer(conn)
	conn.Close()
	if err != nil || !strings.HasPrefix(got, holder.name+" ") {
		t.Fatalf("the LAN host's connection to %s: %q (%v), want %s's answer", lb6IP, got, err, holder.name)
	}
	if mac := lanNeigh(t, self, lb6IP); mac != macOf(t, holder, "eth0") {
		t.Fatalf("the LAN host resolves %s to %v, want %s's %v", lb6IP, mac, holder.name, macOf(t, holder, "eth0"))
	}

	// The holder dies: its agent SIGKILLed, its uplink down.
	old := holder
	old.agent.Process.Kill()
	<-old.agentDone
	old.agent = nil
	must(t, openH(t, old.ns).SetLinkDown("eth0"))
	holder = waitLBHolder(t, c, lb6IP, old.name, "node1", "node2")
	t.Logf("%s died: %s holds %s", old.name, holder.name, lb6IP)
	waitLBService(t, c, holder, web)
	eventually(t, "the LAN host's neighbour entry of "+lb6IP.String()+" (an unsolicited advertisement from "+holder.name+")", func() string {
		if mac := lanNeigh(t, self, lb6IP); mac != macOf(t, holder, "eth0") {
			return fmt.Sprintf("%v, want %s's %v", mac, holder.name, macOf(t, holder, "eth0"))
		}
		return ""
	})

	// The Service deleted: no node holds the address.
	must(t, cs.CoreV1().Services("default").Delete(ctx, "web6", metav1.DeleteOptions{}))
	eventually(t, "no node holds "+lb6IP.String()+" after the Service's deletion", func() string {
		if hs := lbHolders(t, c, lb6IP); len(hs) > 0 {
			return fmt.Sprintf("held by %v", hs)
		}
		return ""
	})
}
