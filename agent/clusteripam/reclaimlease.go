//go:build !nokube

package clusteripam

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// observed is what this agent saw of the reclaim Lease: the version of the
// record it last read and the local time that version was first seen. A
// holder's renewTime is written by its own clock; comparing it with ours
// would hand the Lease away early from a holder whose clock is behind (two
// scanners at once) and never from a dead one whose clock was ahead. As
// client-go's leader election does, the Lease has expired when its record
// has not changed for its duration of our own time.
type observed struct {
	version string
	at      time.Time
}

// expired reports whether l has expired at now (the local clock), noting
// when its record changed. A record seen for the first time starts the
// count: an agent that starts waits a whole duration before it takes a
// Lease that nobody renews.
func (o *observed) expired(l *lease, now time.Time) bool {
	if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "" || l.Spec.LeaseDurationSeconds == nil {
		return true // released, or not a record this election wrote
	}
	if l.ResourceVersion != o.version || o.at.IsZero() {
		o.version, o.at = l.ResourceVersion, now
		return false
	}
	return now.Sub(o.at) > time.Duration(*l.Spec.LeaseDurationSeconds)*time.Second
}

// lease takes or renews the Lease; false when another agent holds it and
// it has not expired. It gives up after the Lease's duration: a request
// the API server never answers (a connection gone silent) must not stop
// the reclaim's next rounds.
func (r *Reclaimer) lease(ctx context.Context) (bool, error) {
	path := fmt.Sprintf("/apis/coordination.k8s.io/v1/namespaces/%s/leases/%s", r.Kube.namespace, LeaseName)
	now := metav1.NewMicroTime(r.Now())
	dur := max(int32(3*r.Interval/time.Second), 1) // a Lease of 0 s would always look expired
	ctx, cancel := context.WithTimeout(ctx, time.Duration(dur)*time.Second)
	defer cancel()
	var l lease
	b, err := r.core.Get().AbsPath(path).DoRaw(ctx)
	if apierrors.IsNotFound(err) {
		l = lease{TypeMeta: metav1.TypeMeta{APIVersion: "coordination.k8s.io/v1", Kind: "Lease"},
			ObjectMeta: metav1.ObjectMeta{Name: LeaseName, Namespace: r.Kube.namespace},
			Spec:       leaseSpec{HolderIdentity: &r.Identity, LeaseDurationSeconds: &dur, RenewTime: &now}}
		body, _ := json.Marshal(&l)
		err = r.core.Post().AbsPath(path[:strings.LastIndex(path, "/")]).Body(body).SetHeader("Content-Type", "application/json").Do(ctx).Error()
		if apierrors.IsAlreadyExists(err) {
			return false, nil
		}
		return err == nil, err
	}
	if err != nil {
		return false, err
	}
	if err := json.Unmarshal(b, &l); err != nil {
		return false, err
	}
	mine := l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity == r.Identity
	if expired := r.seen.expired(&l, now.Time); !mine && !expired {
		return false, nil
	}
	if !mine {
		n := int32(1)
		if l.Spec.LeaseTransitions != nil {
			n += *l.Spec.LeaseTransitions
		}
		l.Spec.LeaseTransitions = &n
	}
	l.Spec.HolderIdentity, l.Spec.LeaseDurationSeconds, l.Spec.RenewTime = &r.Identity, &dur, &now
	body, _ := json.Marshal(&l)
	err = r.core.Put().AbsPath(path).Body(body).SetHeader("Content-Type", "application/json").Do(ctx).Error()
	if apierrors.IsConflict(err) {
		return false, nil
	}
	return err == nil, err
}
