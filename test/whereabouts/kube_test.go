//go:build kube

package whereabouts

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	corev1 "k8s.io/api/core/v1"

	"github.com/cnibox/cnibox/internal/wbpool"
	"github.com/cnibox/cnibox/test/internal/upstream"
	"github.com/cnibox/cnibox/test/kube"
)

// whereabouts' own binary (v0.9.4), built by prepare before the private
// namespace is entered.
var wbBin, wbErr = "", error(nil)

func prepare() { wbBin, wbErr = upstream.Whereabouts() }

// sideBySide is kubeCluster for a test that runs whereabouts' own binary
// too: it needs the binary (built by prepare), and returns the flat file
// (whereabouts.conf) that points it at the cluster.
func sideBySide(t *testing.T) (kubernetes.Interface, string, string) {
	t.Helper()
	if wbErr != nil {
		t.Fatalf("whereabouts %s: %v", upstream.WhereaboutsVersion, wbErr)
	}
	cs, kc := kubeCluster(t)
	flat := filepath.Join(t.TempDir(), "whereabouts.conf")
	// log_level debug: whereabouts' own binary says on stderr whether a DEL
	// released anything (plugin.quietDel); cnibox's role logs only to a
	// log_file, of which this file names none.
	if err := os.WriteFile(flat, []byte(`{"datastore":"kubernetes","kubernetes":{"kubeconfig":"`+kc+`"},"log_level":"debug"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	return cs, kc, flat
}

// kubeCluster starts the control plane (test/kube/control-plane.sh) on the
// test's loopback, installs whereabouts' CRDs (deploy/kubernetes/whereabouts-crds.yaml), and
// returns a client and the kubeconfig.
func kubeCluster(t *testing.T) (kubernetes.Interface, string) {
	t.Helper()
	cs, kc := kube.Client(t)
	manifest, err := os.ReadFile("../../deploy/kubernetes/whereabouts-crds.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var crds []string
	for _, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(manifest), -1) {
		if strings.Contains(doc, "kind: CustomResourceDefinition") {
			crds = append(crds, doc)
		}
	}
	if len(crds) != 3 {
		t.Fatalf("whereabouts-crds.yaml has %d CRDs, want whereabouts' 3", len(crds))
	}
	var crd struct {
		Spec struct {
			Names struct{ Plural string }
		}
	}
	for _, doc := range crds {
		if err := yaml.Unmarshal([]byte(doc), &crd); err != nil {
			t.Fatal(err)
		}
		kube.CreateCRD(t, cs, []byte(doc), "/apis/whereabouts.cni.cncf.io/v1alpha1/namespaces/kube-system/"+crd.Spec.Names.Plural)
	}
	return cs, kc
}

// ipPool reads an IPPool as whereabouts' CRD holds it: address -> owner.
func ipPool(t *testing.T, cs kubernetes.Interface, name string) map[string]wbpool.Allocation {
	t.Helper()
	var p struct {
		Spec struct {
			Range       string                       `json:"range"`
			Allocations map[string]wbpool.Allocation `json:"allocations"`
		} `json:"spec"`
	}
	b, err := cs.CoreV1().RESTClient().Get().AbsPath("/apis/whereabouts.cni.cncf.io/v1alpha1/namespaces/kube-system/ippools/" + name).DoRaw(context.Background())
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &p); err != nil {
		t.Fatal(err)
	}
	base, _, err := wbpool.ParsePoolRange(p.Spec.Range)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]wbpool.Allocation{}
	for off, a := range p.Spec.Allocations {
		ip, ok := wbpool.AddrAt(base, off)
		if !ok {
			t.Fatalf("IPPool %s: key %q is no offset", name, off)
		}
		out[ip.String()] = a
	}
	return out
}

// reservations lists the OverlappingRangeIPReservations' pods.
func reservations(t *testing.T, cs kubernetes.Interface) []string {
	t.Helper()
	var l struct {
		Items []struct {
			Spec struct {
				PodRef string `json:"podref"`
			} `json:"spec"`
		} `json:"items"`
	}
	b, err := cs.CoreV1().RESTClient().Get().AbsPath("/apis/whereabouts.cni.cncf.io/v1alpha1/namespaces/kube-system/overlappingrangeipreservations").DoRaw(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &l); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, it := range l.Items {
		out = append(out, it.Spec.PodRef)
	}
	return out
}

// createPods creates the Pod objects (bound to their node, never run: there
// is no kubelet) so that the pods the pools name exist.
func createPods(t *testing.T, cs kubernetes.Interface, pods map[string]string) {
	t.Helper()
	// No controller creates service accounts here; pod admission wants one.
	_, err := cs.CoreV1().ServiceAccounts("default").Create(context.Background(), &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for name, nodeName := range pods {
		wg.Add(1)
		sem <- struct{}{}
		go func(name, nodeName string) {
			defer func() { <-sem; wg.Done() }()
			p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
				Spec: corev1.PodSpec{NodeName: nodeName, AutomountServiceAccountToken: new(bool), Containers: []corev1.Container{{Name: "c", Image: "none"}}}}
			if _, err := cs.CoreV1().Pods("default").Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
				t.Error(err)
			}
		}(name, nodeName)
	}
	wg.Wait()
}

// attachment is one pod's attachment in the test.
type attachment struct {
	cid, pod string
	p        plugin
	conf     string
}

// run runs verb for every attachment, workers at a time per plugin set, and
// returns cid -> address for ADD.
func run(t *testing.T, ctx context.Context, verb string, groups [][]attachment, workers []int) map[string]string {
	var mu sync.Mutex
	got := map[string]string{}
	var wg sync.WaitGroup
	for g, atts := range groups {
		ch := make(chan attachment)
		for w := 0; w < workers[g]; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for a := range ch {
					out, err := a.p.call(ctx, verb, a.cid, a.pod, a.conf)
					if err != nil && strings.HasPrefix(a.cid, "wb") {
						// whereabouts' own failures (its client's rate limit and
						// deadlines under contention) are its behaviour: counted.
						mu.Lock()
						wbFailures[a.cid] = err.Error()
						mu.Unlock()
						continue
					}
					if err != nil {
						t.Error(err)
						continue
					}
					if verb == "ADD" {
						ip := firstIP(t, out)
						mu.Lock()
						got[a.cid] = ip
						mu.Unlock()
					}
				}
			}()
		}
		go func(atts []attachment, ch chan attachment) {
			for _, a := range atts {
				ch <- a
			}
			close(ch)
		}(atts, ch)
	}
	wg.Wait()
	return got
}

// wbFailures are whereabouts' failed calls (container ID -> error).
var wbFailures = map[string]string{}

// noDuplicates fails unless every attachment got its own address, and the
// pool holds exactly those, each for its container (and what whereabouts'
// failed ADDs left behind, which it does not undo).
func noDuplicates(t *testing.T, got map[string]string, pool map[string]wbpool.Allocation) {
	t.Helper()
	extra := 0
	for _, a := range pool {
		if _, failed := wbFailures[a.ContainerID]; failed {
			extra++
		}
	}
	by := map[string]string{}
	for cid, ip := range got {
		if other, dup := by[ip]; dup {
			t.Errorf("DUPLICATE: %s handed out to %s and %s", ip, other, cid)
		}
		by[ip] = cid
		if a, ok := pool[ip]; !ok || a.ContainerID != cid {
			t.Errorf("%s of %s: the IPPool says %+v", ip, cid, a)
		}
	}
	if len(pool) != len(got)+extra {
		t.Errorf("the IPPool holds %d addresses, the ADDs returned %d (and failed whereabouts ADDs left %d)", len(pool), len(got), extra)
	}
}

// Three cnibox agents add 600 pods (16 at a time per node) while
// whereabouts v0.9.4's own binary adds 60 into the same pool, then both
// delete while adding more: no address is ever handed out twice, and the
// IPPool (whereabouts' CRD, offsets as keys) holds exactly the live ones.
func TestKubeWhereaboutsSideBySide(t *testing.T) {
	cnibox, agent := binaries(t)
	cs, kc, flat := sideBySide(t)
	const rng = "10.60.0.0/22"
	conf := func(socket string) string {
		return `{"cniVersion":"0.3.1","name":"lan","type":"macvlan","master":"eth0","ipam":{"type":"whereabouts","range":"` + rng +
			`","configuration_path":"` + flat + `","agentSocket":"` + socket + `"}}`
	}
	var nodes []*node
	for i := 1; i <= 3; i++ {
		nodes = append(nodes, startAgent(t, agent, fmt.Sprintf("node%d", i), "", "--kubeconfig-file", kc))
	}
	cb := cniboxPlugin(t, cnibox)
	wb := plugin{path: wbBin, argv0: "whereabouts", quietDel: true}

	mk := func(prefix string, n int, pl plugin, confOf func(i int) string) []attachment {
		var out []attachment
		for i := 0; i < n; i++ {
			out = append(out, attachment{cid: fmt.Sprintf("%s-%d", prefix, i), pod: fmt.Sprintf("default/%s-%d", prefix, i), p: pl, conf: confOf(i)})
		}
		return out
	}
	var groups [][]attachment
	var workers []int
	pods := map[string]string{}
	for i, n := range nodes {
		atts := mk(fmt.Sprintf("cb%d", i), 200, cb, func(int) string { return conf(n.socket) })
		groups, workers = append(groups, atts), append(workers, 16)
		for _, a := range atts {
			pods[strings.TrimPrefix(a.pod, "default/")] = n.name
		}
	}
	wbAtts := mk("wb", 60, wb, func(int) string { return conf("") })
	groups, workers = append(groups, wbAtts), append(workers, 4)
	for _, a := range wbAtts {
		pods[strings.TrimPrefix(a.pod, "default/")] = "node1"
	}
	createPods(t, cs, pods)

	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	start := time.Now()
	got := run(t, ctx, "ADD", groups, workers)
	t.Logf("660 ADDs (600 cnibox on 3 agents, 60 whereabouts) took %s", time.Since(start))
	if t.Failed() {
		t.FailNow()
	}
	pool := ipPool(t, cs, wbpool.PoolName(rng, "", ""))
	noDuplicates(t, got, pool)
	if n := len(reservations(t, cs)); n < len(got) {
		t.Errorf("%d OverlappingRangeIPReservations for %d addresses", n, len(got))
	}
	t.Logf("whereabouts v0.9.4: %d of %d ADDs failed on its own (e.g. %v)", len(wbFailures), len(wbAtts), first(wbFailures))
	for ip := range pool {
		if !netip.MustParsePrefix(rng).Contains(netip.MustParseAddr(ip)) {
			t.Errorf("%s outside %s", ip, rng)
		}
	}

	// Leaks: pods deleted without a DEL (their node went down) lose their
	// addresses within a minute (the agent holding the reclaim Lease); one
	// that comes back with the same name gets its address again (sticky).
	leaked := []string{"cb2-0", "cb2-1", "cb2-2", "wb-0", "wb-1"}
	deleted := time.Now()
	for _, name := range leaked {
		if err := cs.CoreV1().Pods("default").Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
			t.Fatal(err)
		}
	}
	for {
		pool := ipPool(t, cs, wbpool.PoolName(rng, "", ""))
		left := 0
		for _, name := range leaked {
			if a, ok := pool[got[name]]; ok && a.PodRef == "default/"+name {
				left++
			}
		}
		if left == 0 {
			t.Logf("the addresses of %d deleted pods were reclaimed %s after the deletion", len(leaked), time.Since(deleted).Round(time.Second))
			break
		}
		if time.Since(deleted) > 90*time.Second {
			t.Fatalf("%d of %d deleted pods still hold their addresses %s after their deletion", left, len(leaked), time.Since(deleted))
		}
		time.Sleep(time.Second)
	}
	createPods(t, cs, map[string]string{"cb2-0": "node1"})
	out, err := cb.call(ctx, "ADD", "cb2-0-again", "default/cb2-0", conf(nodes[0].socket))
	if err != nil {
		t.Fatal(err)
	}
	if ip := firstIP(t, out); ip != got["cb2-0"] {
		t.Errorf("the StatefulSet-like pod default/cb2-0 came back with %s, held %s", ip, got["cb2-0"])
	}
	got["cb2-0-again"] = got["cb2-0"]
	for _, name := range leaked {
		delete(got, name)
	}
	noDuplicates(t, got, ipPool(t, cs, wbpool.PoolName(rng, "", "")))
	groups[2] = append(groups[2], attachment{cid: "cb2-0-again", pod: "default/cb2-0", p: cb, conf: conf(nodes[2].socket)})

	// Both delete everything while both add more.
	var more [][]attachment
	for i, n := range nodes {
		more = append(more, mk(fmt.Sprintf("cb%d-new", i), 40, cb, func(int) string { return conf(n.socket) }))
	}
	more = append(more, mk("wb-new", 20, wb, func(int) string { return conf("") }))
	newPods := map[string]string{}
	for _, g := range more {
		for _, a := range g {
			newPods[strings.TrimPrefix(a.pod, "default/")] = "node2"
		}
	}
	createPods(t, cs, newPods)
	var wg sync.WaitGroup
	var added map[string]string
	wg.Add(2)
	go func() { defer wg.Done(); run(t, ctx, "DEL", groups, workers) }()
	go func() { defer wg.Done(); added = run(t, ctx, "ADD", more, []int{16, 16, 16, 4}) }()
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	// A release the agent could not write at once is queued and written
	// within seconds: wait for the pool to settle before comparing.
	noDuplicates(t, added, settled(t, cs, wbpool.PoolName(rng, "", ""), func(a wbpool.Allocation) bool {
		_, ok := added[a.ContainerID]
		_, failed := wbFailures[a.ContainerID]
		return ok || failed
	}))

	run(t, ctx, "DEL", more, []int{16, 16, 16, 4})
	wbLeft := 0
	for ip, a := range settled(t, cs, wbpool.PoolName(rng, "", ""), func(a wbpool.Allocation) bool { _, failed := wbFailures[a.ContainerID]; return failed }) {
		if _, failed := wbFailures[a.ContainerID]; failed {
			wbLeft++ // whereabouts undoes none of its failed calls
			continue
		}
		t.Errorf("after every DEL the IPPool still holds %s for %+v", ip, a)
	}
	// A queued release deletes its reservation just after the pool write.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(time.Second) {
		var left []string
		for _, pod := range reservations(t, cs) {
			if _, failed := wbFailures[strings.TrimPrefix(pod, "default/")]; !failed {
				left = append(left, pod)
			}
		}
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("after every DEL, OverlappingRangeIPReservations of %d pods are left: %v", len(left), left)
			break
		}
	}
	quiet := 0
	for _, err := range wbFailures {
		if strings.Contains(err, "without saying it released") {
			quiet++
		}
	}
	t.Logf("after every DEL: %d addresses of whereabouts' failed calls left in the pool; %d whereabouts calls failed in all, %d of them DELs that exited 0", wbLeft, len(wbFailures), quiet)
}

func first(m map[string]string) string {
	for k, v := range m {
		return k + ": " + tail(v, 300)
	}
	return "none"
}

// settled reads the pool until every allocation in it is one keep accepts
// (queued releases written), at most a minute, and returns it.
func settled(t *testing.T, cs kubernetes.Interface, name string, keep func(wbpool.Allocation) bool) map[string]wbpool.Allocation {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(time.Second) {
		pool, ok := ipPool(t, cs, name), true
		for _, a := range pool {
			ok = ok && keep(a)
		}
		if ok || time.Now().After(deadline) {
			return pool
		}
	}
}
