//go:build kube

package whereabouts

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/cnibox/cnibox/agent/kubeapi"
)

// TestReclaimScanCost measures what the cluster IPAM's reclaim costs the
// Lease's holder and the API server at $CNIBOX_RECLAIM_PODS pods (e.g.
// 150000: 5,000 nodes of 30), spread over 50 namespaces, each pod with a
// Deployment's labels and owner and the managed fields its creation
// leaves. Not part of make test-kube; the command is in docs/benchmarks.md:
//
//	CNIBOX_RECLAIM_PODS=150000 flock /tmp/cnibox-kube.lock go test -tags kube \
//	  -count=1 -timeout 60m -run TestReclaimScanCost -v ./test/whereabouts/
//
// Before: every scan (15 s) read every pod's metadata, managed fields
// included, in one unpaged JSON list. After: the holder's informer of the
// pods' metadata (kubeapi.MetaListWatch, protobuf, pages of 500, slimmed
// to a set of "namespace/name" keys, kubeapi.RunKeySet) lists once when it
// takes the Lease; a scan reads the set. It logs the bytes and the
// client's memory of each; it asserts only that the set holds the pods.
func TestReclaimScanCost(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("CNIBOX_RECLAIM_PODS"))
	if n <= 0 {
		t.Skip("set CNIBOX_RECLAIM_PODS to the number of pods (a measurement, not a test of behaviour)")
	}
	cs, kc := kubeCluster(t)
	ctx := context.Background()
	t0 := time.Now()
	createManyPods(t, cs, n)
	t.Logf("created %d pods in %v", n, time.Since(t0).Round(time.Second))

	rc, err := clientcmd.BuildConfigFromFlags("", kc)
	if err != nil {
		t.Fatal(err)
	}
	rc.QPS, rc.Burst = 100, 200
	var read atomic.Int64
	rc.Wrap(func(rt http.RoundTripper) http.RoundTripper { return countingRT{rt, &read} })

	// Before: the list each scan made (reclaim.go pods() at d7bbb13).
	core := cs.CoreV1().RESTClient()
	runtime.GC()
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	t1 := time.Now()
	b, err := core.Get().AbsPath("/api/v1/pods").Param("resourceVersion", "0").
		SetHeader("Accept", "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1").DoRaw(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var l struct {
		Items []struct {
			Metadata struct{ Namespace, Name string } `json:"metadata"`
		} `json:"items"`
	}
	if err := json.Unmarshal(b, &l); err != nil {
		t.Fatal(err)
	}
	old := make(map[string]bool, len(l.Items))
	for _, it := range l.Items {
		old[it.Metadata.Namespace+"/"+it.Metadata.Name] = true
	}
	took := time.Since(t1)
	runtime.ReadMemStats(&m1)
	t.Logf("before, every scan: %d pods, %.1f MB of JSON in one response, %.1f MB allocated by the client, %v",
		len(old), float64(len(b))/1e6, float64(m1.TotalAlloc-m0.TotalAlloc)/1e6, took.Round(time.Millisecond))
	b, l.Items, old = nil, nil, nil

	// After: the informer, as the reclaim runs it.
	mc, err := metadata.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	runtime.GC()
	runtime.ReadMemStats(&m0)
	read.Store(0)
	t2 := time.Now()
	ctx2, stop := context.WithCancel(ctx)
	defer stop()
	names := kubeapi.RunKeySet(ctx2, mc, schema.GroupVersionResource{Version: "v1", Resource: "pods"}, "reclaim cost")
	if !cache.WaitForCacheSync(ctx2.Done(), names.Synced) {
		t.Fatal("the pod reflector did not sync")
	}
	took = time.Since(t2)
	runtime.ReadMemStats(&m1)
	listed := read.Load()
	runtime.GC()
	var m2 runtime.MemStats
	runtime.ReadMemStats(&m2)
	for _, k := range []string{"ns-00/app-0000-7d9c5b8f6d-000000", fmt.Sprintf("ns-%02d/app-%04d-7d9c5b8f6d-%06d", (n-1)%50, (n-1)/30, n-1)} {
		if !names.Has(k) {
			t.Errorf("the pod reflector's set lacks %s", k)
		}
	}
	t.Logf("after, once when the Lease is taken: %.1f MB read, %.1f MB allocated by the client, %v; the set holds %.1f MB of heap (%d B a pod); a scan reads the set: 0 B",
		float64(listed)/1e6, float64(m1.TotalAlloc-m0.TotalAlloc)/1e6, took.Round(time.Millisecond),
		float64(int64(m2.HeapAlloc)-int64(m0.HeapAlloc))/1e6, (int64(m2.HeapAlloc)-int64(m0.HeapAlloc))/int64(n))
}

// countingRT counts the response bytes read through it.
type countingRT struct {
	rt http.RoundTripper
	n  *atomic.Int64
}

func (c countingRT) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := c.rt.RoundTrip(r)
	if err == nil {
		resp.Body = countingBody{resp.Body, c.n}
	}
	return resp, err
}

type countingBody struct {
	io.ReadCloser
	n *atomic.Int64
}

func (b countingBody) Read(p []byte) (int, error) {
	k, err := b.ReadCloser.Read(p)
	b.n.Add(int64(k))
	return k, err
}

// createManyPods creates n pods over 50 namespaces, 32 at a time, each
// shaped as a Deployment's (labels, a ReplicaSet owner).
func createManyPods(t *testing.T, cs kubernetes.Interface, n int) {
	t.Helper()
	ctx := context.Background()
	const spaces = 50
	for i := range spaces {
		ns := fmt.Sprintf("ns-%02d", i)
		if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
		if _, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	work := make(chan int)
	var wg sync.WaitGroup
	var failed atomic.Int64
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				ns, rs := fmt.Sprintf("ns-%02d", i%spaces), fmt.Sprintf("app-%04d-7d9c5b8f6d", i/30)
				ctrl := true
				p := &corev1.Pod{
					ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%06d", rs, i), Namespace: ns,
						Labels:          map[string]string{"app": fmt.Sprintf("app-%04d", i/30), "pod-template-hash": "7d9c5b8f6d"},
						OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: rs, UID: "6f1c2a9e-0000-4000-8000-000000000000", Controller: &ctrl}}},
					Spec: corev1.PodSpec{NodeName: fmt.Sprintf("sim-%05d", i/30), AutomountServiceAccountToken: new(bool),
						Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:1.0", Ports: []corev1.ContainerPort{{ContainerPort: 8080}}}}},
				}
				for {
					_, err := cs.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
					if err == nil || apierrors.IsAlreadyExists(err) {
						break
					}
					if failed.Add(1) > 100 {
						t.Errorf("create pod %s: %v", p.Name, err)
						return
					}
					time.Sleep(100 * time.Millisecond)
				}
			}
		}()
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
}
