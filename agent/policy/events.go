//go:build !nokube

package policy

import (
	"context"
	"log/slog"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/cnibox/cnibox/internal/policymodel"
)

// eventReason is the reason of the Warning Event on a policy with an issue,
// and on a Namespace past its caps (nscaps.go).
const eventReason = "PolicyNotExpressible"

// eventer records a Warning Event on the policy of each issue when the
// issue appears. Every agent of the cluster sees the same issue: the
// Event's name is the policy's UID and the issue's hash, so the first agent
// creates it and the others find it there (one request each, once).
type eventer struct {
	c        rest.Interface
	node     string
	log      *slog.Logger
	refs     map[string]corev1.ObjectReference // by policy ID
	reported map[string]bool                   // by Issue.Error()
	q        chan *corev1.Event
}

func newEventer(c rest.Interface, node string, log *slog.Logger) *eventer {
	return &eventer{c: c, node: node, log: log, refs: map[string]corev1.ObjectReference{},
		reported: map[string]bool{}, q: make(chan *corev1.Event, 100)}
}

// ref records the object of policy id (nil: gone). Called under the
// watcher's lock, as note.
func (ev *eventer) ref(id string, r *corev1.ObjectReference) {
	if r == nil {
		delete(ev.refs, id)
		return
	}
	ev.refs[id] = *r
}

// note queues an Event for each issue not reported before; an issue that
// goes away and comes back is reported again.
func (ev *eventer) note(issues []policymodel.Issue) {
	now := map[string]bool{}
	for _, is := range issues {
		key := is.Error()
		now[key] = true
		ref, ok := ev.refs[is.Policy]
		if ev.reported[key] || !ok {
			continue
		}
		ns := ref.Namespace
		switch {
		case ref.Kind == "Namespace":
			ns = ref.Name // a namespace's cap (nscaps.go): its tenant sees it there
		case ns == "":
			ns = metav1.NamespaceDefault // a cluster-scoped object's Events
		}
		if !ev.warn(&ref, ns, key, eventReason, is.Error()) {
			ev.log.Warn("network policy: event queue full; the issue is only logged", "policy", is.Policy)
		}
	}
	ev.reported = now
}

// flowLogReason is the reason of the Warning Event on a Namespace whose
// cnibox.io/flow-log annotation does not parse.
const flowLogReason = "FlowLogAnnotationInvalid"

// badFlowLog queues a Warning Event on namespace ref, whose flow log
// annotation has the value bad (every agent posts it under the same
// name: the first creates it).
func (ev *eventer) badFlowLog(ref *corev1.ObjectReference, bad string) {
	msg := "annotation " + FlowLogAnnotation + " " + strconv.Quote(bad) + ": not deny, allow or allow,deny; nothing of the namespace is logged"
	if !ev.warn(ref, ref.Name, msg, flowLogReason, msg) {
		ev.log.Warn("flow log: event queue full; the bad annotation is only logged", "namespace", ref.Name)
	}
}

// warn queues a Warning Event on ref in namespace ns, named after ref and
// key (every agent posts it under the same name: the first creates it);
// false if the queue is full.
func (ev *eventer) warn(ref *corev1.ObjectReference, ns, key, reason, msg string) bool {
	t := metav1.NewTime(time.Now())
	e := &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Name: ref.Name + "." + policymodel.ShortID(string(ref.UID)+key), Namespace: ns},
		InvolvedObject: *ref,
		Reason:         reason,
		Message:        truncate(msg, 1024),
		Type:           corev1.EventTypeWarning,
		Source:         corev1.EventSource{Component: "cnibox-agent", Host: ev.node},
		FirstTimestamp: t, LastTimestamp: t, Count: 1,
	}
	select {
	case ev.q <- e:
		return true
	default:
		return false
	}
}

// run posts the queued Events until ctx ends.
func (ev *eventer) run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case e := <-ev.q:
			err := ev.c.Post().Namespace(e.Namespace).Resource("events").Body(e).Do(ctx).Error()
			if err != nil && !apierrors.IsAlreadyExists(err) {
				ev.log.Warn("network policy: record the issue's event", "event", e.Name, "err", err)
			}
		}
	}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}

// objectRef is the reference of an Event to obj of kind in group version
// gv.
func objectRef(apiVersion, kind string, m *metav1.ObjectMeta) *corev1.ObjectReference {
	return &corev1.ObjectReference{APIVersion: apiVersion, Kind: kind, Namespace: m.Namespace, Name: m.Name, UID: m.UID, ResourceVersion: m.ResourceVersion}
}
