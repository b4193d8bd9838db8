//go:build !nokube

package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/cnibox/cnibox/agent/kubeapi"
)

// fakeAPI serves a list of pods and one watch of them (its events, in
// JSON), and counts the lists and watches asked for.
type fakeAPI struct {
	pods   []corev1.Pod
	events chan string // watch events' lines

	mu                   sync.Mutex
	lists, watches, open int // open: the watches not ended
}

func (f *fakeAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/api/v1/pods" {
		http.NotFound(w, r)
		return
	}
	q := r.URL.Query()
	if q.Get("watch") == "" {
		f.mu.Lock()
		f.lists++
		f.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"apiVersion": "v1", "kind": "PodList", "metadata": map[string]any{"resourceVersion": "10"}, "items": f.pods})
		return
	}
	if q.Get("sendInitialEvents") != "" { // (no streaming list: client-go lists instead)
		http.Error(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"BadRequest","code":400}`, http.StatusBadRequest)
		return
	}
	f.mu.Lock()
	f.watches++
	f.open++
	f.mu.Unlock()
	defer func() { f.mu.Lock(); f.open--; f.mu.Unlock() }()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	w.(http.Flusher).Flush()
	for {
		select {
		case <-r.Context().Done():
			return
		case e := <-f.events:
			fmt.Fprintln(w, e)
			w.(http.Flusher).Flush()
		}
	}
}

func (f *fakeAPI) watching() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.open
}

func (f *fakeAPI) counts() (lists, watches int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.lists, f.watches
}

func fakePod(name, rv string) corev1.Pod {
	return corev1.Pod{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Namespace: "x", Name: name, ResourceVersion: rv, Labels: map[string]string{"app": name}},
		Spec:       corev1.PodSpec{NodeName: "n1"},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning, PodIPs: []corev1.PodIP{{IP: "192.0.2.1"}}}}
}

// recorder is a handler that keeps the keys of the pods it was handed.
type recorder struct {
	mu   sync.Mutex
	keys map[string]bool
	objs []any
}

func (r *recorder) add(obj any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.keys == nil {
		r.keys = map[string]bool{}
	}
	if p, ok := obj.(*Pod); ok {
		r.keys[p.Key()] = true
	}
	r.objs = append(r.objs, obj)
}

func (r *recorder) handler() cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{AddFunc: r.add, UpdateFunc: func(_, o any) { r.add(o) }}
}

func (r *recorder) has(key string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.keys[key]
}

// waitUntil waits, a minute at most, until cond holds.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within a minute", what)
		}
	}
}

// TestCacheShared: two readers of the pods share one informer (one list,
// one watch); each is handed every pod, listed or watched, slim (a
// *Pod); a reader that comes later is handed what the informer holds; a
// stopped reader is handed nothing more; List and Get answer from the
// one store.
func TestCacheShared(t *testing.T) {
	api := &fakeAPI{pods: []corev1.Pod{fakePod("a", "5"), fakePod("b", "6")}, events: make(chan string)}
	srv := httptest.NewServer(api)
	defer srv.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := New(kubeapi.Cluster{APIURL: srv.URL}, nil)
	c.Start(ctx)
	var one, two recorder
	h1, err := c.Handle(Pods, one.handler())
	if err != nil {
		t.Fatal(err)
	}
	h2, err := c.Handle(Pods, two.handler())
	if err != nil {
		t.Fatal(err)
	}
	if !cache.WaitForCacheSync(ctx.Done(), h1.HasSynced, h2.HasSynced) {
		t.Fatal("not synced")
	}
	for _, r := range []*recorder{&one, &two} {
		if !r.has("x/a") || !r.has("x/b") {
			t.Errorf("a reader was handed %v, want x/a and x/b", r.keys)
		}
	}
	b, _ := json.Marshal(fakePod("c", "11"))
	api.events <- `{"type":"ADDED","object":` + string(b) + `}`
	waitUntil(t, "x/c handed to both", func() bool { return one.has("x/c") && two.has("x/c") })
	for _, o := range one.objs {
		if _, ok := o.(*Pod); !ok {
			t.Errorf("a reader was handed a %T, want *Pod", o)
		}
	}
	if lists, watches := api.counts(); lists != 1 || watches != 1 {
		t.Errorf("two readers: %d lists and %d watches of the pods, want one of each", lists, watches)
	}
	var late recorder
	h3, err := c.Handle(Pods, late.handler())
	if err != nil {
		t.Fatal(err)
	}
	if !cache.WaitForCacheSync(ctx.Done(), h3.HasSynced) || !late.has("x/a") || !late.has("x/b") || !late.has("x/c") {
		t.Errorf("a later reader was handed %v, want x/a, x/b and x/c", late.keys)
	}
	h2.Stop()
	n := len(two.objs)
	b, _ = json.Marshal(fakePod("d", "12"))
	api.events <- `{"type":"ADDED","object":` + string(b) + `}`
	waitUntil(t, "x/d handed to the readers that stay", func() bool { return one.has("x/d") && late.has("x/d") })
	if two.has("x/d") || len(two.objs) != n {
		t.Error("a stopped reader was handed x/d")
	}
	if got := len(c.List(Pods)); got != 4 {
		t.Errorf("List holds %d pods, want 4", got)
	}
	if o, ok := c.Get(Pods, "x/d"); !ok || o.(*Pod).Node != "n1" {
		t.Errorf("Get x/d = %v, %v", o, ok)
	}
	if c.List(Nodes) != nil {
		t.Error("a kind nobody reads is held")
	}
	if lists, watches := api.counts(); lists != 1 || watches != 1 {
		t.Errorf("three readers: %d lists and %d watches of the pods, want one of each", lists, watches)
	}

	// The last reader gone, the informer stops (its watch ends, nothing
	// is held); a reader that comes then lists again.
	h1.Stop()
	h3.Stop()
	h3.Stop() // (twice: once counts)
	waitUntil(t, "the watch ended once no reader is left", func() bool { return api.watching() == 0 })
	if c.List(Pods) != nil {
		t.Error("the pods are held with no reader left")
	}
	var again recorder
	h4, err := c.Handle(Pods, again.handler())
	if err != nil {
		t.Fatal(err)
	}
	defer h4.Stop()
	if !cache.WaitForCacheSync(ctx.Done(), h4.HasSynced) || !again.has("x/a") {
		t.Errorf("a reader after the informer stopped was handed %v, want the list's x/a and x/b", again.keys)
	}
	if lists, _ := api.counts(); lists != 2 {
		t.Errorf("a reader after the informer stopped: %d lists of the pods in all, want 2", lists)
	}
}
