//go:build kube

package mnp

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/google/nftables"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ktypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/cnibox/cnibox/agent/kubeapi"
	"github.com/cnibox/cnibox/internal/agentapi"
	"github.com/cnibox/cnibox/internal/delegaterec"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nft"
	"github.com/cnibox/cnibox/netops/nstest"
	"github.com/cnibox/cnibox/store"
	"github.com/cnibox/cnibox/test/kube"
)

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// status is a network-status annotation with net1 on default/m1 at addr.
func status(addr string) string {
	return fmt.Sprintf(`[{"name":"cbr0","interface":"eth0","ips":["10.244.0.9"],"default":true},{"name":"default/m1","interface":"net1","ips":[%q]}]`, addr)
}

// TestWatchKube: the watcher against a real API server (test/kube) with
// the upstream CRD (deploy/), installed after the watcher started (its
// first policy enforced within 30 s, no restart), and real namespaces: the server pod of node
// n1, whose net1 is a veth to a client namespace that holds the addresses
// of two pods of node n2 (client-a at .1, client-b at .3). A policy for
// m1 that lets client-a in isolates the server at once (client-b's
// address dropped) and lets client-a's address in; client-a's relabel
// takes it out; the policy's deletion removes the table; a pod Admit
// writes is isolated before Admit returns. Run with -tags kube, as root,
// under flock /tmp/cnibox-kube.lock.
func TestWatchKube(t *testing.T) {
	nstest.RequireRoot(t)
	cs, kc := kube.Client(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	doc, err := os.ReadFile("../../deploy/kubernetes/multi-networkpolicy-crd.yaml")
	must(t, err)
	_, doc, _ = bytes.Cut(doc, []byte("\n---\n")) // the comment before it
	mnpPath := "/apis/k8s.cni.cncf.io/v1beta1/namespaces/t/multi-networkpolicies"
	_, err = cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "t"}}, metav1.CreateOptions{})
	must(t, err)
	_, err = cs.CoreV1().ServiceAccounts("t").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{})
	must(t, err)

	// The kernel side: the server's namespace and the clients'.
	srv, cli := nstest.NewNS(t, "mnpsrv"), nstest.NewNS(t, "mnpcli")
	late := nstest.NewNS(t, "mnplate")
	hc, err := netops.Open(cli)
	must(t, err)
	defer hc.Close()
	for i, p := range []string{srv, late} {
		hp, err := netops.Open(p)
		must(t, err)
		defer hp.Close()
		_, _, err = hc.EnsureVeth(netops.VethOpts{HostName: fmt.Sprintf("to%d", i), PeerName: "net1", Peer: hp})
		must(t, err)
		must(t, hp.EnsureAddr("net1", netip.MustParsePrefix(fmt.Sprintf("192.0.2.%d/32", 2+8*i)), netops.AddrOpts{}))
		must(t, hp.EnsureRoute(netops.Route{Dst: netip.MustParsePrefix("192.0.2.0/24"), Dev: "net1"}))
		must(t, hc.EnsureRoute(netops.Route{Dst: netip.MustParsePrefix(fmt.Sprintf("192.0.2.%d/32", 2+8*i)), Dev: fmt.Sprintf("to%d", i)}))
	}
	must(t, hc.EnsureAddr("lo", netip.MustParsePrefix("192.0.2.1/32"), netops.AddrOpts{}))
	must(t, hc.EnsureAddr("lo", netip.MustParsePrefix("192.0.2.3/32"), netops.AddrOpts{}))
	var ln net.Listener
	must(t, nstest.Run(t, srv, func() (err error) { ln, err = net.Listen("tcp", "192.0.2.2:5555"); return err }))
	defer ln.Close()
	go nstest.Greet(ln)
	reach := func(from string) bool {
		var ok bool
		must(t, nstest.Run(t, cli, func() error {
			d := net.Dialer{Timeout: 500 * time.Millisecond, LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
			c, err := d.Dial("tcp", "192.0.2.2:5555")
			if err == nil {
				c.Close()
			}
			ok = err == nil
			return nil
		}))
		return ok
	}
	waitWithin := func(what string, d time.Duration, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(d)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within %v", what, d)
			}
		}
	}
	waitFor := func(what string, cond func() bool) { t.Helper(); waitWithin(what, 60*time.Second, cond) }
	waitFor("the server reachable from both clients without a policy", func() bool { return reach("192.0.2.1") && reach("192.0.2.3") })

	// The node's store: where the CNI calls recorded the pods' namespaces.
	dir := t.TempDir()
	st, err := store.Open(dir)
	must(t, err)
	for _, e := range []store.Endpoint{
		{Network: "m1", ContainerID: "c-server", IfName: "net1", Netns: srv, PodNamespace: "t", PodName: "server", Created: time.Now()},
		{Network: "m1", ContainerID: "c-late", IfName: "net1", Netns: late, PodNamespace: "t", PodName: "late", Created: time.Now()},
	} {
		must(t, st.PutEndpoint(e))
	}
	// and the multi role's delegate records: the node's pods' addresses
	// on their secondary networks (trust.go)
	for _, r := range []struct{ pod, id, addr string }{{"t/server", "c-server", "192.0.2.2/24"}, {"t/late", "c-late", "192.0.2.10/24"}} {
		must(t, delegaterec.Records.In(st).Put(delegaterec.Record{Network: "multus", ContainerID: r.id, IfName: "eth0", Pod: r.pod, Plugin: "multi",
			Delegates: []delegaterec.Delegate{{Name: "m1", IfName: "net1", Result: json.RawMessage(`{"cniVersion":"1.1.0","ips":[{"address":"` + r.addr + `"}]}`)}}}))
	}
	must(t, st.Close())

	no := false
	mkPod := func(name, node, label, addr string) {
		t.Helper()
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "t", Name: name, Labels: map[string]string{"name": label}},
			Spec:       corev1.PodSpec{NodeName: node, AutomountServiceAccountToken: &no, Containers: []corev1.Container{{Name: "c", Image: "none"}}},
		}
		if addr != "" {
			p.Annotations = map[string]string{agentapi.NetworkStatusAnnotation: status(addr)}
		}
		_, err := cs.CoreV1().Pods("t").Create(ctx, p, metav1.CreateOptions{})
		must(t, err)
	}
	mkPod("server", "n1", "server", "192.0.2.2")
	mkPod("client-a", "n2", "client-a", "192.0.2.1")
	mkPod("client-b", "n2", "client-b", "192.0.2.3")

	w, err := New(Config{Cluster: kubeapi.Cluster{Kubeconfig: kc, NodeName: "n1"}, DataDir: dir, Resync: 2 * time.Second})
	must(t, err)
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	defer func() { cancel(); <-done }()

	// The CRD comes after the agent (operators install CRDs in any
	// order): the watcher, started without it, finds it (crd.go asks
	// discovery every 10 s) and enforces a policy made then within 30 s,
	// with no restart.
	kube.CreateCRD(t, cs, doc, "/apis/k8s.cni.cncf.io/v1beta1/multi-networkpolicies")
	policyJSON := `{"apiVersion":"k8s.cni.cncf.io/v1beta1","kind":"MultiNetworkPolicy",
		"metadata":{"name":"in","namespace":"t","annotations":{"k8s.v1.cni.cncf.io/policy-for":"default/m1"}},
		"spec":{"podSelector":{"matchLabels":{"name":"server"}},"ingress":[{"from":[{"podSelector":{"matchLabels":{"name":"client-a"}}}]}]}}`
	must(t, cs.CoreV1().RESTClient().Post().AbsPath(mnpPath).Body([]byte(policyJSON)).SetHeader("Content-Type", "application/json").Do(ctx).Error())
	waitWithin("the CRD installed after the watcher, then a policy: client-a in, client-b out", 30*time.Second,
		func() bool { return reach("192.0.2.1") && !reach("192.0.2.3") })

	// Someone in the pod flushes the table's base chains (input, and
	// output, which judges the replies): client-b gets in; the syncer's
	// next resync writes the table again (the watcher before compared with
	// what it had written, and never did).
	tamper, err := nftables.New(nftables.WithNetNSFd(nsFd(t, srv)))
	must(t, err)
	for _, c := range []string{"input", "output"} {
		tamper.FlushChain(&nftables.Chain{Table: &nftables.Table{Name: nft.MultiTable, Family: nftables.TableFamilyINet}, Name: c})
	}
	must(t, tamper.Flush())
	if !reach("192.0.2.3") { // (or the resync came first)
		t.Log("client-b not in right after the flush: the table was put back already")
	}
	waitFor("the flushed table put back: client-b out", func() bool { return reach("192.0.2.1") && !reach("192.0.2.3") })

	relabel(t, cs, "client-a", "client-c")
	waitFor("client-a relabelled: out", func() bool { return !reach("192.0.2.1") && !reach("192.0.2.3") })
	relabel(t, cs, "client-b", "client-a")
	waitFor("client-b labelled client-a: in", func() bool { return !reach("192.0.2.1") && reach("192.0.2.3") })

	// A new pod of the node (label server) with no network-status yet:
	// Admit, as the pod API does after the multi role's ADD, isolates it
	// before it returns.
	mkPod("late", "n1", "server", "")
	actx, acancel := context.WithTimeout(ctx, 20*time.Second)
	defer acancel()
	must(t, w.Admit(actx, "t", "late", json.RawMessage(status("192.0.2.10"))))
	hl, err := nft.Open(late)
	must(t, err)
	defer hl.Close()
	if ok, err := hl.HasPodPolicy(); err != nil || !ok {
		t.Fatalf("late's table after Admit: %v, %v", ok, err)
	}
	// A pod of the node that no policy isolates: Admit writes nothing.
	must(t, w.Admit(actx, "t", "server", json.RawMessage(`[]`)))

	must(t, cs.CoreV1().RESTClient().Delete().AbsPath(mnpPath+"/in").Do(ctx).Error())
	waitFor("the policy deleted: both in", func() bool { return reach("192.0.2.1") && reach("192.0.2.3") })
	hs, err := nft.Open(srv)
	must(t, err)
	defer hs.Close()
	if ok, err := hs.HasPodPolicy(); err != nil || ok {
		t.Errorf("server's table after the policy's deletion: %v, %v; want none", ok, err)
	}
}

// nsFd is an open descriptor of the namespace at path, closed when the
// test ends.
func nsFd(t *testing.T, path string) int {
	f, err := os.Open(path)
	must(t, err)
	t.Cleanup(func() { f.Close() })
	return int(f.Fd())
}

func relabel(t *testing.T, cs kubernetes.Interface, name, label string) {
	t.Helper()
	patch := fmt.Sprintf(`{"metadata":{"labels":{"name":%q}}}`, label)
	_, err := cs.CoreV1().Pods("t").Patch(context.Background(), name, ktypes.MergePatchType, []byte(patch), metav1.PatchOptions{})
	must(t, err)
}
