package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
)

// watcher follows the bench namespace's Services: when each first shows
// an ingress address, and whether an address is ever held by two
// Services at once (at no version of the watch may one be).
type watcher struct {
	mu      sync.Mutex
	at      map[string]time.Time     // Service -> when its ingress was first seen
	waits   map[string]chan struct{} // closed when it is
	holds   map[string][]string      // Service -> its addresses now
	holder  map[string]string        // address -> Service
	doubles []string
}

func newWatcher() *watcher {
	return &watcher{at: map[string]time.Time{}, waits: map[string]chan struct{}{}, holds: map[string][]string{}, holder: map[string]string{}}
}

// run follows the Services until ctx ends, from a list, the watch
// restarted from the last version seen whenever the server ends it.
func (w *watcher) run(ctx context.Context, cs kubernetes.Interface) error {
	svcs := cs.CoreV1().Services(benchNS)
	l, err := svcs.List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	for i := range l.Items {
		w.apply(&l.Items[i], false)
	}
	rv := l.ResourceVersion
	go func() {
		for ctx.Err() == nil {
			wi, err := svcs.Watch(ctx, metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true})
			if err != nil {
				time.Sleep(200 * time.Millisecond)
				continue
			}
			for ev := range wi.ResultChan() {
				s, ok := ev.Object.(*corev1.Service)
				if !ok {
					continue // (an error: watched again from rv)
				}
				rv = s.ResourceVersion
				if ev.Type != watch.Bookmark {
					w.apply(s, ev.Type == watch.Deleted)
				}
			}
		}
	}()
	return nil
}

// apply records s's ingress as of this event.
func (w *watcher) apply(s *corev1.Service, deleted bool) {
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, a := range w.holds[s.Name] {
		delete(w.holder, a)
	}
	delete(w.holds, s.Name)
	if deleted {
		return
	}
	for _, in := range s.Status.LoadBalancer.Ingress {
		if o, ok := w.holder[in.IP]; ok && o != s.Name {
			w.doubles = append(w.doubles, fmt.Sprintf("%s held by %s and %s at version %s", in.IP, o, s.Name, s.ResourceVersion))
		}
		w.holder[in.IP] = s.Name
		w.holds[s.Name] = append(w.holds[s.Name], in.IP)
	}
	if len(s.Status.LoadBalancer.Ingress) > 0 {
		if _, ok := w.at[s.Name]; !ok {
			w.at[s.Name] = now
			if ch := w.waits[s.Name]; ch != nil {
				close(ch)
			}
		}
	}
}

// wait waits until Service name shows an ingress and returns when it
// first did.
func (w *watcher) wait(name string, timeout time.Duration) (time.Time, error) {
	w.mu.Lock()
	if t, ok := w.at[name]; ok {
		w.mu.Unlock()
		return t, nil
	}
	ch := w.waits[name]
	if ch == nil {
		ch = make(chan struct{})
		w.waits[name] = ch
	}
	w.mu.Unlock()
	select {
	case <-ch:
	case <-time.After(timeout):
		return time.Time{}, fmt.Errorf("service %s has no address after %s", name, timeout)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.at[name], nil
}

// doubled are the addresses seen held by two Services at once.
func (w *watcher) doubled() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.doubles...)
}
