//go:build kube

package lbipam

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	admv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/cnibox/cnibox/agent/kubeapi"
	"github.com/cnibox/cnibox/test/kube"
)

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// startAPI starts a dual-stack control plane with the pools' CRD.
func startAPI(t *testing.T) (kubernetes.Interface, string) {
	kc := kube.Start(t, []string{"KCP_SERVICE_CIDR=10.96.0.0/16,fd00:96::/112"})
	cs := kube.Clientset(t, kc)
	crd, err := os.ReadFile("../../deploy/kubernetes/loadbalancerippool-crd.yaml")
	must(t, err)
	kube.CreateCRD(t, cs, crd, "/apis/cnibox.io/v1alpha1/loadbalancerippools")
	return cs, kc
}

func createPool(cs kubernetes.Interface, name, spec string) error {
	return cs.CoreV1().RESTClient().Post().AbsPath("/apis/cnibox.io/v1alpha1/loadbalancerippools").
		Body([]byte(`{"apiVersion":"cnibox.io/v1alpha1","kind":"LoadBalancerIPPool","metadata":{"name":"`+name+`"},"spec":`+spec+`}`)).
		SetHeader("Content-Type", "application/json").Do(context.Background()).Error()
}

// lbService is a Service of type LoadBalancer on port.
func lbService(name string, port int32, mod ...func(*corev1.Service)) *corev1.Service {
	s := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Selector: map[string]string{"app": name},
			Ports: []corev1.ServicePort{{Port: port, TargetPort: intstr.FromInt32(port), Protocol: corev1.ProtocolTCP}}}}
	for _, m := range mod {
		m(s)
	}
	return s
}

// ingress waits until Service name's ingress satisfies ok, and returns it.
func ingress(t *testing.T, cs kubernetes.Interface, name string, ok func([]string) bool) []string {
	t.Helper()
	var got []string
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		s, err := cs.CoreV1().Services("default").Get(context.Background(), name, metav1.GetOptions{})
		must(t, err)
		got = nil
		for _, in := range s.Status.LoadBalancer.Ingress {
			got = append(got, in.IP)
		}
		if ok(got) {
			return got
		}
	}
	t.Fatalf("Service %s: ingress %v, never what the test waits for", name, got)
	return nil
}

func some(ips []string) bool { return len(ips) > 0 }

// warning waits for a Warning Event of reason on Service name whose
// message holds text.
func warning(t *testing.T, cs kubernetes.Interface, name, reason, text string) {
	t.Helper()
	var seen []string
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		evs, err := cs.CoreV1().Events("default").List(context.Background(), metav1.ListOptions{})
		must(t, err)
		seen = nil
		for _, e := range evs.Items {
			if e.InvolvedObject.Kind == "Service" && e.InvolvedObject.Name == name {
				seen = append(seen, e.Type+" "+e.Reason+": "+e.Message)
				if e.Type == corev1.EventTypeWarning && e.Reason == reason && strings.Contains(e.Message, text) {
					return
				}
			}
		}
	}
	t.Fatalf("Service %s: events %q, want a Warning %s with %q", name, seen, reason, text)
}

// runController runs the controller in the test until the test ends,
// its metrics in reg.
func runController(t *testing.T, kc, node string, reg *prometheus.Registry) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		err := Run(ctx, Config{Cluster: kubeapi.Cluster{Kubeconfig: kc, NodeName: node}, Every: 200 * time.Millisecond, CRDPoll: 200 * time.Millisecond,
			ClusterNetworks: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")}, Register: reg.Register})
		if err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
}

// TestKubePoolSchema: the CRD's schema refuses a block that is both a cidr
// and a range, a start without a stop, a range of two families, an IPv4
// range backwards; it takes a cidr and a range of each family.
func TestKubePoolSchema(t *testing.T) {
	cs, _ := startAPI(t)
	for spec, want := range map[string]string{
		`{"blocks":[{"cidr":"192.0.2.0/24","start":"192.0.2.1","stop":"192.0.2.2"}]}`: "a block is a cidr, or a start and a stop",
		`{"blocks":[{"start":"192.0.2.1"}]}`:                                          "a block is a cidr, or a start and a stop",
		`{"blocks":[{"start":"192.0.2.1","stop":"2001:db8::1"}]}`:                     "of one family",
		`{"blocks":[{"start":"192.0.2.20","stop":"192.0.2.3"}]}`:                      "start must not be after stop",
		`{"blocks":[{"cidr":"192.0.2.0/33"}]}`:                                        "must be a CIDR",
		`{"blocks":[{"start":"192.0.2.x","stop":"192.0.2.3"}]}`:                       "must be an address",
		`{"blocks":[]}`: "should have at least 1 items",
		`{"blocks":[{"cidr":"192.0.2.0/24"}],"serviceSelector":{"matchExpressions":[{"key":"a","operator":"In"}]}}`: "In and NotIn need values",
	} {
		err := createPool(cs, "bad", spec)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("pool %s: %v, want a refusal with %q", spec, err, want)
		}
	}
	for i, spec := range []string{
		`{"blocks":[{"cidr":"192.0.2.0/24"},{"cidr":"2001:db8::/64"}]}`,
		`{"blocks":[{"start":"192.0.2.3","stop":"192.0.2.20"},{"start":"2001:db8::1","stop":"2001:db8::ff"}],"disabled":true,"allowFirstLastIPs":true}`,
		`{"blocks":[{"start":"192.0.2.3","stop":"192.0.2.3"}],"serviceSelector":{"matchLabels":{"team":"a"}}}`,
	} {
		must(t, createPool(cs, fmt.Sprintf("good%d", i), spec))
	}
}

// TestKubeLBIPAM: a Service of type LoadBalancer gets an address from a
// pool, dual stack as it asks, shares one under MetalLB's rules, gets the
// address it asks for unless another holds it (a Warning Event says why),
// is told when the pool is exhausted, gives the address back when deleted
// or no longer of type LoadBalancer; another class's Service is left
// alone, and a pool overlapping another or the cluster network is marked
// and gives nothing.
func TestKubeLBIPAM(t *testing.T) {
	cs, kc := startAPI(t)
	ctx := context.Background()
	must(t, createPool(cs, "a-v4", `{"blocks":[{"cidr":"192.0.2.0/29"}]}`)) // .1 - .6
	must(t, createPool(cs, "b-v6", `{"blocks":[{"start":"2001:db8::10","stop":"2001:db8::11"}]}`))
	must(t, createPool(cs, "c-overlap", `{"blocks":[{"cidr":"192.0.2.4/30"}]}`))
	must(t, createPool(cs, "d-cluster", `{"blocks":[{"cidr":"10.244.7.0/24"}]}`))
	reg := prometheus.NewRegistry()
	runController(t, kc, "node-a", reg)
	svcs := cs.CoreV1().Services("default")
	create := func(s *corev1.Service) {
		t.Helper()
		_, err := svcs.Create(ctx, s, metav1.CreateOptions{})
		must(t, err)
	}

	create(lbService("first", 80))
	if got := ingress(t, cs, "first", some); !slices.Equal(got, []string{"192.0.2.1"}) {
		t.Errorf("first: %v, want 192.0.2.1 (the lowest of a-v4)", got)
	}
	policy := corev1.IPFamilyPolicyPreferDualStack
	create(lbService("dual", 80, func(s *corev1.Service) {
		s.Spec.IPFamilyPolicy, s.Spec.IPFamilies = &policy, []corev1.IPFamily{corev1.IPv6Protocol, corev1.IPv4Protocol}
	}))
	if got := ingress(t, cs, "dual", func(ips []string) bool { return len(ips) == 2 }); !slices.Equal(got, []string{"2001:db8::10", "192.0.2.2"}) {
		t.Errorf("dual: %v, want 2001:db8::10 then 192.0.2.2 (ipFamilies' order)", got)
	}
	share := func(s *corev1.Service) { s.Annotations = map[string]string{AnnotationShare: "k"} }
	create(lbService("web", 80, share))
	create(lbService("web-tls", 443, share))
	create(lbService("web-again", 80, share))
	web := ingress(t, cs, "web", some)
	if tls := ingress(t, cs, "web-tls", some); !slices.Equal(tls, web) {
		t.Errorf("web-tls %v, web %v: the same key and other ports share", tls, web)
	}
	if again := ingress(t, cs, "web-again", some); slices.Equal(again, web) {
		t.Errorf("web-again %v, web %v: the same port shares no address", again, web)
	}

	create(lbService("thief", 8080, func(s *corev1.Service) { s.Spec.LoadBalancerIP = web[0] }))
	warning(t, cs, "thief", ReasonRefused, "held by default/web, default/web-tls and the two do not have the same metallb.universe.tf/allow-shared-ip key")
	if s, _ := svcs.Get(ctx, "thief", metav1.GetOptions{}); len(s.Status.LoadBalancer.Ingress) != 0 {
		t.Errorf("thief: %v, want no address", s.Status.LoadBalancer.Ingress)
	}
	create(lbService("asks", 80, func(s *corev1.Service) { s.Annotations = map[string]string{AnnotationIPs: "192.0.2.6"} }))
	if got := ingress(t, cs, "asks", some); !slices.Equal(got, []string{"192.0.2.6"}) {
		t.Errorf("asks: %v, want the address of its annotation", got)
	}
	create(lbService("last", 80))
	ingress(t, cs, "last", some) // (.5: the pool's last)
	create(lbService("over", 80))
	warning(t, cs, "over", ReasonExhausted, "a-v4")
	for name, want := range map[string]float64{
		`cnibox_agent_lb_ipam_pool_addresses_used{pool="a-v4"}`: 6, `cnibox_agent_lb_ipam_pool_addresses_free{pool="a-v4"}`: 0,
		`cnibox_agent_lb_ipam_pool_addresses_used{pool="b-v6"}`: 1, `cnibox_agent_lb_ipam_pool_addresses_free{pool="b-v6"}`: 1,
		`cnibox_agent_lb_ipam_leader`: 1, `cnibox_agent_lb_ipam_services_short`: 2, // over and thief
	} {
		if got := gauge(t, reg, name); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}

	other := "example.com/other"
	create(lbService("theirs", 80, func(s *corev1.Service) { s.Spec.LoadBalancerClass = &other }))

	// Released: "first"'s address goes to the Service that waits.
	must(t, svcs.Delete(ctx, "first", metav1.DeleteOptions{}))
	if got := ingress(t, cs, "over", some); !slices.Equal(got, []string{"192.0.2.1"}) {
		t.Errorf("over: %v, want 192.0.2.1 once first is deleted", got)
	}
	// ... and on a change of type.
	s, err := svcs.Get(ctx, "last", metav1.GetOptions{})
	must(t, err)
	s.Spec.Type = corev1.ServiceTypeClusterIP
	for i := range s.Spec.Ports {
		s.Spec.Ports[i].NodePort = 0
	}
	_, err = svcs.Update(ctx, s, metav1.UpdateOptions{})
	must(t, err)
	ingress(t, cs, "last", func(ips []string) bool { return len(ips) == 0 })
	if s, _ := svcs.Get(ctx, "thief", metav1.GetOptions{}); len(s.Status.LoadBalancer.Ingress) != 0 {
		t.Errorf("thief: %v: it asks for %s, held by web, and takes no other", s.Status.LoadBalancer.Ingress, web[0])
	}
	must(t, svcs.Delete(ctx, "web", metav1.DeleteOptions{}))
	must(t, svcs.Delete(ctx, "web-tls", metav1.DeleteOptions{}))
	if got := ingress(t, cs, "thief", some); !slices.Equal(got, web) {
		t.Errorf("thief: %v, want %v, which it asks for, once web and web-tls are deleted", got, web)
	}
	if s, _ := svcs.Get(ctx, "theirs", metav1.GetOptions{}); len(s.Status.LoadBalancer.Ingress) != 0 {
		t.Errorf("theirs (another class): %v, want it left alone", s.Status.LoadBalancer.Ingress)
	}
	for pool, want := range map[string]string{"c-overlap": "overlaps block 192.0.2.1-192.0.2.6 of pool a-v4", "d-cluster": "overlaps the cluster network 10.244.0.0/16", "a-v4": ""} {
		var p LoadBalancerIPPool
		must(t, cs.CoreV1().RESTClient().Get().AbsPath("/apis/cnibox.io/v1alpha1/loadbalancerippools/"+pool).Do(ctx).Into(&p))
		var c *metav1.Condition
		for i := range p.Status.Conditions {
			if p.Status.Conditions[i].Type == PoolConflict {
				c = &p.Status.Conditions[i]
			}
		}
		switch {
		case c == nil:
			t.Errorf("pool %s: no %s condition: %+v", pool, PoolConflict, p.Status)
		case want == "" && c.Status != metav1.ConditionFalse, want != "" && (c.Status != metav1.ConditionTrue || !strings.Contains(c.Message, want)):
			t.Errorf("pool %s: %+v, want %q", pool, c, want)
		}
	}
}

// TestKubeLBIPAMAutoAssign: a pool of autoAssign false (the CRD's default
// is true) gives nothing to a Service that does not ask (a NoPool Warning
// Event saying why), an address to one naming it in MetalLB's current
// annotation metallb.io/address-pool and the address asked for to one
// asking; a Service naming a pool that does not exist is told so; the
// writes are counted in cnibox_agent_lb_ipam_status_writes_total.
func TestKubeLBIPAMAutoAssign(t *testing.T) {
	cs, kc := startAPI(t)
	ctx := context.Background()
	must(t, createPool(cs, "auto", `{"blocks":[{"cidr":"198.51.100.0/30"}],"serviceSelector":{"matchLabels":{"pool":"auto"}}}`))
	must(t, createPool(cs, "manual", `{"blocks":[{"cidr":"192.0.2.0/29"}],"autoAssign":false}`))
	var p LoadBalancerIPPool
	must(t, cs.CoreV1().RESTClient().Get().AbsPath("/apis/cnibox.io/v1alpha1/loadbalancerippools/auto").Do(ctx).Into(&p))
	if p.Spec.AutoAssign == nil || !*p.Spec.AutoAssign {
		t.Errorf("pool auto: spec.autoAssign %v, want the CRD's default true", p.Spec.AutoAssign)
	}
	reg := prometheus.NewRegistry()
	runController(t, kc, "node-a", reg)
	svcs := cs.CoreV1().Services("default")
	for _, s := range []*corev1.Service{
		lbService("plain", 80),
		lbService("named", 80, func(s *corev1.Service) { s.Annotations = map[string]string{AnnotationStable(AnnotationPool): "manual"} }),
		lbService("asks", 80, func(s *corev1.Service) { s.Annotations = map[string]string{AnnotationIPs: "192.0.2.5"} }),
		lbService("nowhere", 80, func(s *corev1.Service) { s.Annotations = map[string]string{AnnotationPool: "gone"} }),
	} {
		_, err := svcs.Create(ctx, s, metav1.CreateOptions{})
		must(t, err)
	}
	if got := ingress(t, cs, "named", some); !slices.Equal(got, []string{"192.0.2.1"}) {
		t.Errorf("named: %v, want 192.0.2.1 (the lowest of the pool it names)", got)
	}
	if got := ingress(t, cs, "asks", some); !slices.Equal(got, []string{"192.0.2.5"}) {
		t.Errorf("asks: %v, want 192.0.2.5, which it asks for", got)
	}
	warning(t, cs, "plain", ReasonNoPool, "whose autoAssign is not false")
	warning(t, cs, "nowhere", ReasonNoPool, "names pool gone, and there is no LoadBalancerIPPool of that name")
	for _, name := range []string{"plain", "nowhere"} {
		if s, _ := svcs.Get(ctx, name, metav1.GetOptions{}); len(s.Status.LoadBalancer.Ingress) != 0 {
			t.Errorf("%s: %v, want no address", name, s.Status.LoadBalancer.Ingress)
		}
	}
	// (each Service's status written once: an address, or the condition
	// saying why not)
	if got := gauge(t, reg, `cnibox_agent_lb_ipam_status_writes_total{result="ok"}`); got < 4 {
		t.Errorf("status writes ok: %v, want at least 4", got)
	}
	if got := gauge(t, reg, `cnibox_agent_lb_ipam_services_short`); got != 2 {
		t.Errorf("services_short: %v, want 2 (plain, nowhere)", got)
	}
}

// TestLBIPAMAgent is one controller in a child process of
// TestKubeLBIPAMFailover and TestKubeLBIPAMCutOff (skipped otherwise),
// through the proxy LBIPAM_AGENT_API if set; each status write waits
// LBIPAM_AGENT_DELAY first, so that a kill lands in the middle of a pass.
func TestLBIPAMAgent(t *testing.T) {
	kc := os.Getenv("LBIPAM_AGENT_KUBECONFIG")
	if kc == "" {
		t.Skip("run by TestKubeLBIPAMFailover")
	}
	delay, _ := time.ParseDuration(os.Getenv("LBIPAM_AGENT_DELAY"))
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		ch := make(chan os.Signal, 1)
		signal.Notify(ch, syscall.SIGTERM)
		<-ch
		cancel()
	}()
	must(t, Run(ctx, Config{Cluster: kubeapi.Cluster{Kubeconfig: kc, APIURL: os.Getenv("LBIPAM_AGENT_API"), NodeName: os.Getenv("LBIPAM_AGENT_NODE")},
		Every: 200 * time.Millisecond, CRDPoll: 200 * time.Millisecond, BeforeWrite: func(string) { time.Sleep(delay) }}))
}

// TestKubeLBIPAMFailover: two controllers run at once, and the one that
// leads is killed (SIGKILL: it gives nothing up) in the middle of
// allocating, again and again, a new one started each time, while
// Services keep coming and some go; at no version of the Services, as their watch
// reports them one change at a time, do two Services hold one address,
// no Service's address ever changes (each new leader rebuilds the
// allocations from the Services' status), and in the end every Service
// holds one.
func TestKubeLBIPAMFailover(t *testing.T) {
	cs, kc := startAPI(t)
	ctx := context.Background()
	must(t, createPool(cs, "pool", `{"blocks":[{"cidr":"192.0.2.0/25"}]}`)) // 126
	svcs := cs.CoreV1().Services("default")
	hw := watchHolds(t, cs)
	holds, drain := hw.holds, hw.drain

	agents := map[string]*exec.Cmd{}
	n := 0
	start := func() {
		n++
		node := fmt.Sprintf("node-%d", n)
		agents[node] = startController(t, kc, node, nil)
	}
	leader := func() string { return leaseHolder(cs) }
	start()
	start()
	// More Services a round than the leader has writes in flight
	// (writers), so that a kill lands in the middle of a pass.
	const perRound = 20
	total, kills := 0, 0
	deleted := 0
	for round := 0; round < 6; round++ {
		if round > 0 { // a hole among the addresses given: filled, never closed by moving the others
			deleted++
			must(t, svcs.Delete(ctx, fmt.Sprintf("s%03d", perRound*round-3), metav1.DeleteOptions{}))
		}
		for range perRound {
			total++
			_, err := svcs.Create(ctx, lbService(fmt.Sprintf("s%03d", total), 80), metav1.CreateOptions{})
			must(t, err)
		}
		// Kill the leader once it wrote a few of this round's.
		before := countHeld(holds)
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			drain()
			// (a live leader's: writes of a killed one may reach the watch late)
			if countHeld(holds) >= before+2 && agents[leader()] != nil || time.Now().After(deadline) {
				break
			}
		}
		if l := leader(); agents[l] != nil {
			must(t, agents[l].Process.Kill())
			agents[l].Wait()
			delete(agents, l)
			kills++
			start()
		}
	}
	if kills < 4 {
		t.Errorf("%d leaders killed, want at least 4", kills)
	}
	for deadline := time.Now().Add(time.Minute); countHeld(holds) < total-deleted && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		drain()
	}
	drain()
	if countHeld(holds) != total-deleted {
		t.Errorf("%d of %d Services hold an address: %v", countHeld(holds), total-deleted, holds)
	}
	for _, d := range hw.dups {
		t.Error(d)
	}
}

func countHeld(holds map[string][]string) int {
	n := 0
	for _, h := range holds {
		if len(h) > 0 {
			n++
		}
	}
	return n
}

// TestKubePoolPolicy: cnibox.yaml's policy cnibox-loadbalancerippool, with
// its ConfigMap as the parameter, refuses a pool with a block in the
// cluster network of net-conf.json (a cidr in it or holding it, a start or
// a stop in it), naming the block and the network; it takes one outside.
func TestKubePoolPolicy(t *testing.T) {
	cs, _ := startAPI(t)
	ctx := context.Background()
	b, err := os.ReadFile("../../deploy/kubernetes/cnibox.yaml")
	must(t, err)
	for _, doc := range strings.Split(string(b), "\n---\n") {
		var meta struct {
			Kind     string
			Metadata metav1.ObjectMeta
		}
		if yaml.Unmarshal([]byte(doc), &meta) != nil {
			continue
		}
		switch {
		case meta.Kind == "ValidatingAdmissionPolicy" && meta.Metadata.Name == "cnibox-loadbalancerippool":
			var p admv1.ValidatingAdmissionPolicy
			must(t, yaml.UnmarshalStrict([]byte(doc), &p))
			_, err := cs.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(ctx, &p, metav1.CreateOptions{})
			must(t, err)
		case meta.Kind == "ValidatingAdmissionPolicyBinding" && meta.Metadata.Name == "cnibox-loadbalancerippool":
			var p admv1.ValidatingAdmissionPolicyBinding
			must(t, yaml.UnmarshalStrict([]byte(doc), &p))
			_, err := cs.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Create(ctx, &p, metav1.CreateOptions{})
			must(t, err)
		case meta.Kind == "ConfigMap" && meta.Metadata.Name == "cnibox":
			var cm corev1.ConfigMap
			must(t, yaml.UnmarshalStrict([]byte(doc), &cm))
			_, err := cs.CoreV1().ConfigMaps(cm.Namespace).Create(ctx, &cm, metav1.CreateOptions{})
			must(t, err)
		}
	}
	// The policy takes a moment to be in force.
	var err2 error
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if err2 = createPool(cs, "inside", `{"blocks":[{"cidr":"10.244.3.0/24"}]}`); err2 != nil {
			break
		}
		cs.CoreV1().RESTClient().Delete().AbsPath("/apis/cnibox.io/v1alpha1/loadbalancerippools/inside").Do(ctx)
	}
	if err2 == nil || !strings.Contains(err2.Error(), "spec.blocks: 10.244.3.0/24 overlaps the cluster network 10.244.0.0/16 of net-conf.json") {
		t.Errorf("a pool in the cluster network: %v, want a refusal naming the block and the network", err2)
	}
	for _, spec := range []string{`{"blocks":[{"cidr":"10.0.0.0/8"}]}`, `{"blocks":[{"start":"10.244.255.250","stop":"10.245.0.5"}]}`} {
		if err := createPool(cs, "holds", spec); err == nil || !strings.Contains(err.Error(), "overlaps the cluster network") {
			t.Errorf("pool %s: %v, want refused", spec, err)
		}
	}
	must(t, createPool(cs, "outside", `{"blocks":[{"cidr":"192.0.2.0/24"},{"start":"10.245.0.1","stop":"10.245.0.9"}]}`))
}

// gauge is the value of the gauge or counter name{labels} in reg (-1:
// none).
func gauge(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	must(t, err)
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			id := mf.GetName()
			if len(m.GetLabel()) > 0 {
				var ls []string
				for _, l := range m.GetLabel() {
					ls = append(ls, l.GetName()+`="`+l.GetValue()+`"`)
				}
				id += "{" + strings.Join(ls, ",") + "}"
			}
			if id == name && m.GetGauge() != nil {
				return m.GetGauge().GetValue()
			}
			if id == name && m.GetCounter() != nil {
				return m.GetCounter().GetValue()
			}
		}
	}
	return -1
}
