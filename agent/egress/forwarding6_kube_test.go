//go:build kube

package egress

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cnibox/cnibox/agent/kubeapi"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nstest"
	"github.com/cnibox/cnibox/test/kube"
)

// syncBuffer is a log the test reads while the controller writes it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestKubeEgressForwarding6: a node of a single-stack IPv6 cluster
// (issue 64) that does not forward IPv6 publishes no IPv6 network, so
// holds no IPv6 egress address; once IPv6 forwarding comes on (the bridge role
// turns it on with the node's first IPv6 pod; the agent never does), the
// node publishes its uplink's IPv6 network at once: the kernel's
// announcement is watched for IPv6 as for IPv4 (the agent's periodic
// recheck is an hour here, so only the watch can do it), and holds the
// address, the gateway's status Ready.
func TestKubeEgressForwarding6(t *testing.T) {
	nstest.RequireRoot(t)
	kc := kube.Start(t, nil)
	cs := kube.Clientset(t, kc)
	ctx := context.Background()
	crd, err := os.ReadFile("../../deploy/kubernetes/egressgateway-crd.yaml")
	must(t, err)
	kube.CreateCRD(t, cs, crd, "/apis/cnibox.io/v1alpha1/egressgateways")
	_, err = cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "v6"}}, metav1.CreateOptions{})
	must(t, err)
	h, err := netops.Open(nstest.NewNS(t, "egf6"))
	must(t, err)
	t.Cleanup(func() { h.Close() })
	_, err = h.EnsureBridge(netops.BridgeOpts{Name: "eth0"}) // (the uplink: any link with an address)
	must(t, err)
	must(t, h.SetLinkUp("eth0"))
	must(t, h.EnsureAddr("eth0", netip.MustParsePrefix("2001:db8:77::11/64"), netops.AddrOpts{NoDAD: true}))
	// (and an IPv4 network, which it publishes from the start: the gateway's
	// status is written by a node that publishes one, and says when the
	// controller runs)
	must(t, h.EnsureAddr("eth0", netip.MustParsePrefix("192.0.2.11/24"), netops.AddrOpts{}))
	must(t, h.SetSysctl("net.ipv6.conf.all.forwarding", "0"))
	// (IPv4's is on: the agent would turn it on, and the kernel's
	// announcement of that would have it publish again)
	must(t, h.SetSysctl("net.ipv4.ip_forward", "1"))
	_, err = cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: LeaseNamespace}}, metav1.CreateOptions{})
	must(t, err)
	must(t, createGateway(cs, `{"apiVersion":"cnibox.io/v1alpha1","kind":"EgressGateway","metadata":{"name":"gw"},"spec":{"egressIPs":["2001:db8:77::50"]}}`))

	var log syncBuffer
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- Run(rctx, Config{
			Cluster: kubeapi.Cluster{Kubeconfig: kc, NodeName: "v6"}, Namespace: LeaseNamespace, Host: h,
			DataDir: t.TempDir(), CRDPoll: time.Second, Recheck: time.Hour,
			Log: slog.New(slog.NewTextHandler(&log, nil)),
			Overlay: func() (string, []netip.Prefix, bool) {
				return "eth0", []netip.Prefix{netip.MustParsePrefix("fd00:10:244::/56")}, true
			},
		})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
		if t.Failed() {
			t.Logf("the controller's log:\n%s", log.String())
		}
	})
	annotation := func() string {
		n, err := cs.CoreV1().Nodes().Get(ctx, "v6", metav1.GetOptions{})
		must(t, err)
		return n.Annotations[NetworksAnnotation]
	}
	// The gateway's status says no node may hold its address: the
	// controller's loop runs, past its first publication.
	status := func() (ready metav1.ConditionStatus, reason string, held []HeldIP) {
		var g EgressGateway
		b, err := cs.CoreV1().RESTClient().Get().AbsPath("/apis/cnibox.io/v1alpha1/egressgateways/gw").DoRaw(ctx)
		must(t, err)
		must(t, json.Unmarshal(b, &g))
		for _, c := range g.Status.Conditions {
			if c.Type == "Ready" {
				return c.Status, c.Reason, g.Status.EgressIPs
			}
		}
		return "", "", g.Status.EgressIPs
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		if st, reason, _ := status(); st == metav1.ConditionFalse && reason == "NoEligibleNode" {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("a minute after the start: the gateway's Ready is %q (%s), want False (NoEligibleNode)", st, reason)
		}
	}
	if v := annotation(); v != "192.0.2.0/24" {
		t.Fatalf("without IPv6 forwarding the node publishes %q, want its IPv4 network alone", v)
	}
	if !strings.Contains(log.String(), "does not forward IPv6") {
		t.Errorf("the controller does not say that the node does not forward IPv6")
	}
	must(t, h.SetSysctl("net.ipv6.conf.all.forwarding", "1"))
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		if v := annotation(); slices.Contains(ParseNetworks(v), netip.MustParsePrefix("2001:db8:77::/64")) {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("a minute after the node began to forward IPv6: its %s is %q, want 2001:db8:77::/64 in it", NetworksAnnotation, v)
		}
	}
	// And it holds the address.
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		st, reason, held := status()
		if st == metav1.ConditionTrue && len(held) == 1 && held[0] == (HeldIP{EgressIP: "2001:db8:77::50", Node: "v6"}) {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("a minute after the node published its IPv6 network: the gateway's Ready is %q (%s), held %v; want True, by v6", st, reason, held)
		}
	}
}
