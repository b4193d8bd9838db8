//go:build !nokube

package lbipam

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
)

// LeaseName is the coordination Lease whose holder allocates (one agent of
// the cluster at a time), in Config.Namespace.
const LeaseName = "cnibox-lb-ipam"

// election holds or waits for the Lease, as the cluster IPAM's reclaim
// does: another agent's Lease has expired when its record has not changed
// for its duration of this agent's clock (no two clocks compared). Its
// holder may write only while fresh: until its last renewal, counted from
// when it was sent, is older than the duration less one renewal period;
// so a holder cut off stops writing before any other agent may take the
// Lease.
type election struct {
	c         rest.Interface // coordination.k8s.io/v1
	namespace string
	identity  string
	every     time.Duration // a renewal period
	duration  int32         // seconds, at least 3 periods
	now       func() time.Time

	version string    // the record as last read ...
	seenAt  time.Time // ... and when it changed

	// mu guards sent: the loop renews while sync's writers ask fresh.
	mu   sync.Mutex
	sent time.Time // when the last renewal that succeeded was sent
}

func (e *election) setSent(t time.Time) {
	e.mu.Lock()
	e.sent = t
	e.mu.Unlock()
}

func (e *election) path() string {
	return "/apis/coordination.k8s.io/v1/namespaces/" + e.namespace + "/leases"
}

// fresh reports whether this agent holds the Lease and may write.
func (e *election) fresh() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.sent.IsZero() {
		return false
	}
	return e.now().Sub(e.sent) < time.Duration(e.duration)*time.Second-e.every
}

// step takes or renews the Lease: true when this agent holds it now. A
// step gives up after the Lease's duration: a renewal later than that is
// of no use, and a request the API server never answers (a connection
// gone silent) must not stop the next renewals.
func (e *election) step(ctx context.Context) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Duration(max(e.duration, 1))*time.Second)
	defer cancel()
	sent := e.now()
	now := metav1.NewMicroTime(sent)
	l := &coordv1.Lease{}
	err := e.c.Get().AbsPath(e.path(), LeaseName).Do(ctx).Into(l)
	if apierrors.IsNotFound(err) {
		l = &coordv1.Lease{TypeMeta: metav1.TypeMeta{APIVersion: "coordination.k8s.io/v1", Kind: "Lease"},
			ObjectMeta: metav1.ObjectMeta{Name: LeaseName, Namespace: e.namespace, Labels: map[string]string{"app": "cnibox"}}}
		return e.write(ctx, l, sent, now, true)
	}
	if err != nil {
		return e.lost(err)
	}
	mine := l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity == e.identity
	if !mine && !e.expired(l, sent) {
		e.setSent(time.Time{})
		return false, nil
	}
	if !mine {
		n := int32(1)
		if l.Spec.LeaseTransitions != nil {
			n += *l.Spec.LeaseTransitions
		}
		l.Spec.LeaseTransitions, l.Spec.AcquireTime = &n, &now
	}
	return e.write(ctx, l, sent, now, false)
}

// write creates or updates the Lease with this agent as its holder.
func (e *election) write(ctx context.Context, l *coordv1.Lease, sent time.Time, now metav1.MicroTime, create bool) (bool, error) {
	l.Spec.HolderIdentity, l.Spec.LeaseDurationSeconds, l.Spec.RenewTime = &e.identity, &e.duration, &now
	if create {
		l.Spec.AcquireTime = &now
	}
	body, err := json.Marshal(l)
	if err != nil {
		return e.lost(err)
	}
	req := e.c.Put().AbsPath(e.path(), LeaseName)
	if create {
		req = e.c.Post().AbsPath(e.path())
	}
	err = req.Body(body).SetHeader("Content-Type", "application/json").Do(ctx).Error()
	if apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) {
		e.setSent(time.Time{})
		return false, nil
	}
	if err != nil {
		return e.lost(err)
	}
	e.setSent(sent)
	return true, nil
}

// lost: this agent cannot tell whether it holds the Lease; it writes
// nothing more until a renewal succeeds (fresh measures from the last).
func (e *election) lost(err error) (bool, error) {
	return e.fresh(), err
}

// expired reports whether l has expired at now, noting when its record
// changed; a record seen first starts the count.
func (e *election) expired(l *coordv1.Lease, now time.Time) bool {
	if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "" || l.Spec.LeaseDurationSeconds == nil {
		return true
	}
	if l.ResourceVersion != e.version || e.seenAt.IsZero() {
		e.version, e.seenAt = l.ResourceVersion, now
		return false
	}
	return now.Sub(e.seenAt) > time.Duration(*l.Spec.LeaseDurationSeconds)*time.Second
}

// release gives the Lease up (an agent that stops): another agent takes
// it at its next step rather than a duration later.
func (e *election) release(ctx context.Context) {
	if !e.fresh() {
		return
	}
	l := &coordv1.Lease{}
	if err := e.c.Get().AbsPath(e.path(), LeaseName).Do(ctx).Into(l); err != nil {
		return
	}
	if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != e.identity {
		return
	}
	empty := ""
	l.Spec.HolderIdentity = &empty
	e.setSent(time.Time{})
	if body, err := json.Marshal(l); err == nil {
		_ = e.c.Put().AbsPath(e.path(), LeaseName).Body(body).SetHeader("Content-Type", "application/json").Do(ctx).Error()
	}
}
