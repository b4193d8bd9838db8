//go:build kube

package bridge_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"path/filepath"
	"slices"
	"sort"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	nv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cnibox/cnibox/agent/kubeapi"
	"github.com/cnibox/cnibox/agent/podapi"
	"github.com/cnibox/cnibox/agent/policy"
	"github.com/cnibox/cnibox/agent/policynft"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nft"
	"github.com/cnibox/cnibox/netops/nstest"
	"github.com/cnibox/cnibox/roles/bridge"
	"github.com/cnibox/cnibox/roles/hostlocal"
	"github.com/cnibox/cnibox/roles/internal/roletest"
	"github.com/cnibox/cnibox/test/kube"
)

// TestPolicyAdmitKube: a new pod open at once. The agent's policy watcher
// and table (this test's node namespace), its pod API on a socket, a real
// API server (test/kube) and the bridge role's ADD: in namespace default,
// whose NetworkPolicy lets pods labelled client reach pods labelled web on
// TCP 80, each new web pod's ADD returns with the pod placed (not
// pending), and the client's first connection to it, made as the ADD
// returns, gets through; a db pod, which a policy isolates and lets
// nothing reach, is placed too and stays closed to the client; a DEL
// releases the address. The pods' status
// never gets an address here (no kubelet): without the admission they
// would be pending for ever. It logs, over the web pods, the ADD's time
// and the time from the ADD's return to the first allowed packet's
// answer. Run with -tags kube, as root, under flock /tmp/cnibox-kube.lock.
func TestPolicyAdmitKube(t *testing.T) {
	cs, kc := kube.Client(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	n := roletest.NewNode(t, bridge.Role, hostlocal.Role)
	host := openNode(t)
	t.Cleanup(func() { host.DeleteLink("bradm") })
	if err := host.SetSysctls(netops.SysctlSetting{Key: "net.bridge.bridge-nf-call-iptables", Value: "1"}); err != nil {
		t.Skipf("no br_netfilter: bridged traffic never meets the forward hook (%v)", err)
	}
	c := gwConf("adm", "bradm", 12, "")
	_, err := cs.CoreV1().ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	no := false
	mkPod := func(name, app string, ip netip.Addr) {
		t.Helper()
		p, err := cs.CoreV1().Pods("default").Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": app}},
			Spec:       corev1.PodSpec{NodeName: "n1", AutomountServiceAccountToken: &no, Containers: []corev1.Container{{Name: "c", Image: "none"}}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if ip.IsValid() {
			p.Status.PodIP, p.Status.PodIPs = ip.String(), []corev1.PodIP{{IP: ip.String()}}
			if _, err := cs.CoreV1().Pods("default").UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	// The client: added with the plain ADD (no agent yet), its status set
	// as a kubelet would.
	client := n.NewPod("client")
	clientIP := podAddr(t, n.Must(bridge.Role, "ADD", client, c))
	mkPod(client.ID, "client", clientIP)
	_, err = cs.NetworkingV1().NetworkPolicies("default").Create(ctx, &nv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: nv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Ingress: []nv1.NetworkPolicyIngressRule{{From: []nv1.NetworkPolicyPeer{{
				PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "client"}},
			}}}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = cs.NetworkingV1().NetworkPolicies("default").Create(ctx, &nv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "db"},
		Spec:       nv1.NetworkPolicySpec{PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	// The agent: the watcher and its sink in this node namespace, the pod
	// API on a socket of the test's.
	sink, err := policynft.New("")
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close()
	t.Cleanup(func() { _ = sink.Remove() })
	adm := policy.NewAdmitter()
	synced := make(chan struct{})
	log := slog.New(slog.DiscardHandler)
	go sink.Run(ctx, log) // the agent's one syncer, as cnibox-agent starts it
	go func() {
		err := policy.Watch(ctx, policy.WatchConfig{Cluster: kubeapi.Cluster{Kubeconfig: kc, NodeName: "n1"}, Log: log, Syncer: sink,
			Admitter: adm, Synced: func() { close(synced) }})
		if err != nil && ctx.Err() == nil {
			t.Errorf("watch: %v", err)
		}
	}()
	select {
	case <-synced:
	case <-time.After(time.Minute):
		t.Fatal("the watcher did not sync in a minute")
	}
	sock := filepath.Join(t.TempDir(), "agent.sock")
	ln, err := podapi.Listen(sock, podapi.NoGroup)
	if err != nil {
		t.Fatal(err)
	}
	go podapi.Serve(ctx, ln, nil, log, podapi.Access{GID: podapi.NoGroup, Policy: adm.Serve})
	t.Setenv("CNIBOX_AGENT_SOCKET", sock)

	h, err := nft.Open("")
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	dial := func(to netip.Addr) error {
		return nstest.Run(t, client.Netns, func() error {
			c, err := net.DialTimeout("tcp", netip.AddrPortFrom(to, 80).String(), 500*time.Millisecond)
			if err == nil {
				c.Close()
			}
			return err
		})
	}
	var adds, firsts []time.Duration
	const pods = 20
	for i := range pods {
		app := "web"
		if i == pods-1 {
			app = "db" // a policy isolates it and lets nothing in
		}
		web := n.NewPod(app)
		mkPod(web.ID, app, netip.Addr{})
		var ln net.Listener
		start := time.Now()
		ip := podAddr(t, n.Must(bridge.Role, "ADD", web, c))
		added := time.Now()
		if err := nstest.Run(t, web.Netns, func() (err error) { ln, err = net.Listen("tcp", netip.AddrPortFrom(ip, 80).String()); return err }); err != nil {
			t.Fatal(err)
		}
		go nstest.Greet(ln)
		err := dial(ip)
		first := time.Since(added)
		ln.Close()
		pend, _, _ := h.PolicySetAddrs(nft.PolicyPending)
		if app == "db" {
			if err == nil {
				t.Errorf("%s: the client reaches a pod whose policy lets nothing in", web.ID)
			}
			if slices.Contains(pend, ip) {
				t.Errorf("%s (%s) pending after its ADD returned: closed by pending, not by its policy", web.ID, ip)
			}
			continue
		}
		if slices.Contains(pend, ip) {
			t.Errorf("%s (%s) pending after its ADD returned", web.ID, ip)
		}
		if err != nil {
			t.Errorf("%s: the client's first connection, as the ADD returned: %v", web.ID, err)
		}
		adds, firsts = append(adds, added.Sub(start)), append(firsts, first)
		if i == 0 {
			n.Must(bridge.Role, "DEL", web, c)
			if err := dial(ip); err == nil {
				t.Errorf("%s's address still open after its DEL", web.ID)
			}
		}
	}
	sort.Slice(adds, func(i, j int) bool { return adds[i] < adds[j] })
	sort.Slice(firsts, func(i, j int) bool { return firsts[i] < firsts[j] })
	q := func(d []time.Duration, p float64) string {
		return fmt.Sprintf("%.1f ms", float64(d[int(p*float64(len(d)-1))].Microseconds())/1000)
	}
	t.Logf("%d web pods: ADD p50 %s p99 %s; ADD returned to the first allowed packet answered: p50 %s p99 %s",
		len(adds), q(adds, 0.5), q(adds, 0.99), q(firsts, 0.5), q(firsts, 0.99))
}
