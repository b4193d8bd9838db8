package cluster

import (
	"runtime"
	"slices"
	"strings"
	"sync"
	"unique"
	"weak"
)

// The cache holds every pod of the cluster, and most of a pod's bytes are
// strings and a label map that many pods share: the pods of one
// ReplicaSet have the same labels (pod-template-hash included), a
// namespace's pods the same namespace string, a node's the same node name.
// The informers' decoder makes each of them anew for every pod; interning
// keeps one copy. Nothing is kept for label sets no pod holds any more
// (weak pointers), so churn with unique labels (a StatefulSet's pod-name,
// a Job's controller-uid) leaks nothing.

// labelSet is an interned set of labels, never changed once made.
type labelSet struct{ m map[string]string }

var labelSets = struct {
	sync.Mutex
	byKey map[string]weak.Pointer[labelSet]
}{byKey: map[string]weak.Pointer[labelSet]{}}

// internLabels returns the shared labelSet equal to m (nil for none).
func internLabels(m map[string]string) *labelSet {
	if len(m) == 0 {
		return nil
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	for _, k := range keys {
		b.WriteString(k)
		b.WriteByte(0)
		b.WriteString(m[k])
		b.WriteByte(0)
	}
	key := b.String()
	labelSets.Lock()
	defer labelSets.Unlock()
	if wp, ok := labelSets.byKey[key]; ok {
		if l := wp.Value(); l != nil {
			return l
		}
	}
	l := &labelSet{m: make(map[string]string, len(m))}
	for k, v := range m {
		l.m[intern(k)] = intern(v)
	}
	labelSets.byKey[key] = weak.Make(l)
	runtime.AddCleanup(l, forgetLabels, key)
	return l
}

// forgetLabels drops the entry of key once its labelSet is gone (unless
// another has taken its place).
func forgetLabels(key string) {
	labelSets.Lock()
	defer labelSets.Unlock()
	if wp, ok := labelSets.byKey[key]; ok && wp.Value() == nil {
		delete(labelSets.byKey, key)
	}
}

// intern returns the canonical copy of s.
func intern(s string) string { return unique.Make(s).Value() }

// internPod makes p share its strings and labels with the pods that have
// the same.
func internPod(p *Pod) {
	p.Namespace, p.Node = intern(p.Namespace), intern(p.Node)
	p.labels = internLabels(p.Labels)
	p.Labels = nil
	if p.labels != nil {
		p.Labels = p.labels.m
	}
	for i := range p.Ports {
		p.Ports[i].Name = intern(p.Ports[i].Name)
	}
	for i := range p.Attachments {
		a := &p.Attachments[i]
		a.Network, a.Iface = intern(a.Network), intern(a.Iface)
	}
}
