//go:build !nokube

package mnp

import (
	"context"
	"log/slog"
	"time"

	"k8s.io/client-go/rest"

	"github.com/cnibox/cnibox/agent/policy"
)

// The MultiNetworkPolicy CRD installed after the agent (issue 62, item 4):
// operators install CRDs in any order. An informer of a resource the API
// does not serve retries its list on client-go's backoff, which grows to
// 30 s and, with its jitter, waits up to a minute between tries: a CRD
// applied then would be seen that late. So the watcher asks discovery
// every crdEvery until the API serves the resource, and only then starts
// the policies' informer: the CRD is seen within crdEvery and a list.
// Meanwhile the pods' handlers run (Admit answers: no policy, no table).

// crdEvery is how often discovery is asked while the CRD is missing.
var crdEvery = 10 * time.Second

// waitServed returns once the API serves MultiNetworkPolicies (asking c's
// discovery every every), or with ctx's error. It logs the wait once.
func waitServed(ctx context.Context, c rest.Interface, every time.Duration, log *slog.Logger) error {
	logged := false
	for {
		names, err := policy.Served(ctx, c, GroupVersion(), "multi-networkpolicies")
		if err == nil && len(names) > 0 {
			if logged {
				log.Info("multi-network policy: the MultiNetworkPolicy CRD is served now")
			}
			return nil
		}
		if !logged {
			logged = true
			log.Warn("multi-network policy: the API serves no MultiNetworkPolicies (CRD "+GroupVersion().String()+
				" not installed?); asking again every "+every.String(), "err", err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(every):
		}
	}
}
