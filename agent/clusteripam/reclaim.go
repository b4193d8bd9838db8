//go:build !nokube

package clusteripam

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"time"

	"k8s.io/client-go/rest"

	"github.com/cnibox/cnibox/agent/cluster"
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
	// Pods is the agent's informer cache (agent/cluster): which pods
	// exist, read while this agent holds the Lease.
	Pods *cluster.Cache
	Log  *slog.Logger
	// Now is the local clock (time.Now; tests set it).
	Now func() time.Time

	core    rest.Interface
	seen    observed         // the Lease as last read, and when it last changed
	pods    *cluster.Handler // the reclaim as a reader of Pods, while this agent holds the Lease
	missing map[string]bool  // "pool|offset" or "orip|name" missing at the last scan
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
	if r.Now == nil {
		r.Now = time.Now
	}
	defer r.stopPods()
	t := time.NewTicker(r.Interval)
	defer t.Stop()
	for {
		held, err := r.lease(ctx)
		switch {
		case err != nil:
			r.Log.Warn("cluster IPAM reclaim: lease", "err", err)
		case held:
			if exists := r.podsSynced(ctx); exists != nil {
				if err := r.scan(ctx, exists); err != nil {
					r.Log.Warn("cluster IPAM reclaim: scan", "err", err)
				}
			}
		default:
			r.missing = nil // another agent scans; start over when we lead
			r.stopPods()
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// gone reports whether podRef names a Kubernetes pod that does not exist
// (a podref without a namespace is not a Kubernetes pod's: left alone).
func gone(exists func(string) bool, podRef string) bool {
	ns, name, ok := strings.Cut(podRef, "/")
	return ok && ns != "" && name != "" && !exists(podRef)
}

// scan releases what was missing at the last scan and is missing still.
func (r *Reclaimer) scan(ctx context.Context, pods func(string) bool) error {
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
