//go:build !nokube

package policy

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"k8s.io/client-go/rest"
)

// Policy resources installed after the agent (issue 62, item 4): the
// ClusterNetworkPolicy CRD applied after cnibox, or upgraded from
// network-policy-api v0.2.0 (v1alpha2) to v0.3.0 (v1beta1), and the staged
// policies' CRDs. Operators install CRDs in any order: the watcher asks
// discovery again every rediscoverEvery, and when what the API serves is
// not what it watches, it watches again from the start (Watch's loop),
// within rediscoverEvery and a list of the cluster. The kernel keeps the
// last rules meanwhile, and the syncer's next transaction replaces the
// whole table (the new watch's first sync is Full).

// errAPIChanged ends a watch whose policy resources the API serves
// otherwise now.
var errAPIChanged = errors.New("the API serves other policy resources")

// rediscoverEvery is how often discovery is asked again.
var rediscoverEvery = 10 * time.Second

// apiSeen is what the API served when a watch began: the
// ClusterNetworkPolicy version watched ("" none: not asked, or not
// served) and the staged policies' resources.
type apiSeen struct {
	cnp    string
	staged []string
}

// rediscover asks discovery every every until ctx ends, and ends the watch
// (cancel with errAPIChanged) once the API serves other policy resources
// than seen. Discovery that does not answer changes nothing.
func (w *watcher) rediscover(ctx context.Context, cancel context.CancelCauseFunc, c rest.Interface, seen apiSeen, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if w.cfg.ClusterNetworkPolicies {
			now, err := servedCNP(ctx, c)
			if err == nil && now != seen.cnp {
				cancel(fmt.Errorf("%w: ClusterNetworkPolicy %q, was %q", errAPIChanged, now, seen.cnp))
				return
			}
		}
		if w.cfg.FlowLog != nil {
			now, err := Served(ctx, c, StagedGroupVersion(), "stagednetworkpolicies", "stagedclusternetworkpolicies")
			if err == nil && !slices.Equal(now, seen.staged) {
				cancel(fmt.Errorf("%w: staged policies %v, were %v", errAPIChanged, now, seen.staged))
				return
			}
		}
	}
}

// servedCNP is the newest ClusterNetworkPolicy version the API serves
// ("" none), asked once.
func servedCNP(ctx context.Context, c rest.Interface) (string, error) {
	for _, gv := range cnpVersions {
		names, err := Served(ctx, c, gv, "clusternetworkpolicies")
		if err != nil {
			return "", err
		}
		if len(names) > 0 {
			return gv.String(), nil
		}
	}
	return "", nil
}
