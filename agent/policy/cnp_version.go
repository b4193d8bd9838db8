//go:build !nokube

package policy

import (
	"context"
	"log/slog"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	cnpv1 "sigs.k8s.io/network-policy-api/apis/v1beta1"
)

// cnpVersions are the versions of ClusterNetworkPolicy the agent watches,
// the newest first: network-policy-api v0.3.0 made v1beta1 the stored
// version and still serves v1alpha2, whose schema is the same; v0.2.0's
// CRD serves v1alpha2 alone. Either version's objects decode into
// v1beta1's types (the same fields, the same JSON).
var cnpVersions = []schema.GroupVersion{
	{Group: cnpv1.GroupName, Version: cnpv1.GroupVersion.Version},
	{Group: cnpv1.GroupName, Version: "v1alpha2"},
}

// cnpVersion is the newest version of ClusterNetworkPolicy the API
// serves. Discovery that does not answer is asked again, after 1 s, then
// twice as long each time up to 30 s, for as long as ctx lasts: picked on
// a blip, the newest version could be one the API does not serve, and
// the watch would then wait for it until the agent's next start. When the
// API answers that it serves none (no CRD yet), or ctx ends, it is the
// newest, and ok is false: the watch then waits for it as for any
// resource the API refuses.
func cnpVersion(ctx context.Context, c rest.Interface, log *slog.Logger) (gv schema.GroupVersion, ok bool) {
	wait := time.Second
	for {
		var failed error
		for _, gv := range cnpVersions {
			names, err := Served(ctx, c, gv, "clusternetworkpolicies")
			if len(names) > 0 {
				return gv, true
			}
			if err != nil {
				failed = err
			}
		}
		if failed == nil {
			return cnpVersions[0], false
		}
		log.Warn("network policy: which ClusterNetworkPolicy version the API serves is not known yet; asking again", "err", failed, "in", wait)
		select {
		case <-ctx.Done():
			return cnpVersions[0], false
		case <-time.After(wait):
		}
		wait = min(2*wait, 30*time.Second)
	}
}
