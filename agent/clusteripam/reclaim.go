//go:build !nokube

package clusteripam

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/cnibox/cnibox/internal/agentapi"
	"github.com/cnibox/cnibox/internal/kubecore"
)

// LeaseName is the coordination Lease whose holder reclaims leaked
// addresses (one agent of the cluster at a time).
const LeaseName = "cnibox-whereabouts-reclaim"

// Reclaimer frees the addresses of pods that are gone: deleted while their
// node was down, or with their node. The agent holding the Lease scans
// every Interval; an allocation whose pod ("namespace/name") is missing in
// two scans in a row is released (and remembered for the pod: a StatefulSet
// pod that comes back gets it again), as is its OverlappingRangeIPReservation.
type Reclaimer struct {
	Kube     *Kube
	Alloc    *Allocator
	Identity string        // this agent (its node)
	Interval time.Duration // default 15s; the lease lasts three
	Log      *slog.Logger

	core    rest.Interface
	missing map[string]bool // "pool|offset" or "orip|name" missing at the last scan
}

// Run holds or waits for the Lease and scans while it holds it, until ctx
// ends.
func (r *Reclaimer) Run(ctx context.Context) {
	if r.Interval <= 0 {
		r.Interval = 15 * time.Second
	}
	c, err := kubecore.Client(r.Kube.rc)
	if err != nil {
		r.Log.Error("cluster IPAM reclaim: no core client", "err", err)
		return
	}
	r.core = c
	t := time.NewTicker(r.Interval)
	defer t.Stop()
	for {
		held, err := r.lease(ctx)
		switch {
		case err != nil:
			r.Log.Warn("cluster IPAM reclaim: lease", "err", err)
		case held:
			if err := r.scan(ctx); err != nil {
				r.Log.Warn("cluster IPAM reclaim: scan", "err", err)
			}
		default:
			r.missing = nil // another agent scans; start over when we lead
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// lease takes or renews the Lease; false when another agent holds it and
// it has not expired.
func (r *Reclaimer) lease(ctx context.Context) (bool, error) {
	path := fmt.Sprintf("/apis/coordination.k8s.io/v1/namespaces/%s/leases/%s", r.Kube.namespace, LeaseName)
	now := metav1.NewMicroTime(time.Now())
	dur := max(int32(3*r.Interval/time.Second), 1) // a Lease of 0 s would always look expired
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
	expired := l.Spec.RenewTime == nil || l.Spec.LeaseDurationSeconds == nil ||
		time.Since(l.Spec.RenewTime.Time) > time.Duration(*l.Spec.LeaseDurationSeconds)*time.Second
	if !mine && !expired {
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

// pods lists the cluster's pods as "namespace/name" (metadata only).
func (r *Reclaimer) pods(ctx context.Context) (map[string]bool, error) {
	b, err := r.core.Get().AbsPath("/api/v1/pods").Param("resourceVersion", "0").
		SetHeader("Accept", "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1").DoRaw(ctx)
	if err != nil {
		return nil, err
	}
	var l struct {
		Items []struct {
			Metadata struct{ Namespace, Name string } `json:"metadata"`
		} `json:"items"`
	}
	if err := json.Unmarshal(b, &l); err != nil {
		return nil, err
	}
	out := make(map[string]bool, len(l.Items))
	for _, it := range l.Items {
		out[it.Metadata.Namespace+"/"+it.Metadata.Name] = true
	}
	return out, nil
}

// gone reports whether podRef names a Kubernetes pod that does not exist
// (a podref without a namespace is not a Kubernetes pod's: left alone).
func gone(pods map[string]bool, podRef string) bool {
	ns, name, ok := strings.Cut(podRef, "/")
	return ok && ns != "" && name != "" && !pods[podRef]
}

// scan releases what was missing at the last scan and is missing still.
func (r *Reclaimer) scan(ctx context.Context) error {
	pods, err := r.pods(ctx)
	if err != nil {
		return err
	}
	pools, err := r.Kube.ListPools(ctx)
	if err != nil {
		return err
	}
	now := map[string]bool{}
	var errs []error
	for _, p := range pools {
		for off, a := range p.Allocations {
			if !gone(pods, a.PodRef) {
				continue
			}
			key := p.Name + "|" + off
			now[key] = true
			if !r.missing[key] {
				continue
			}
			req := &agentapi.IPAMRequest{ContainerID: a.ContainerID, IfName: a.IfName, PodRef: a.PodRef, Sticky: true, Overlapping: true}
			if err := r.Alloc.release(ctx, target{pool: p.Name}, req); err != nil {
				errs = append(errs, err)
				continue
			}
			delete(now, key)
			r.Log.Info("cluster IPAM: reclaimed the address of a deleted pod", "pool", p.Name, "offset", off, "pod", a.PodRef, "container", a.ContainerID)
		}
	}
	reservations, err := r.Kube.ListReservations(ctx)
	if err != nil {
		errs = append(errs, err)
	}
	for name, res := range reservations {
		if !gone(pods, res.PodRef) {
			continue
		}
		key := "orip|" + name
		now[key] = true
		if r.missing[key] {
			if err := r.Kube.DeleteReservation(ctx, name); err != nil {
				errs = append(errs, err)
			} else {
				delete(now, key)
			}
		}
	}
	r.missing = now
	return errors.Join(errs...)
}
