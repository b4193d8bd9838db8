package policy

import (
	"context"

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
	cnpv1.SchemeGroupVersion,
	{Group: cnpv1.GroupName, Version: "v1alpha2"},
}

// cnpVersion is the newest version of ClusterNetworkPolicy the API
// serves; when it serves none (no CRD yet, or no answer), the newest, and
// served is false: the watch then waits for it as for any resource the
// API refuses.
func cnpVersion(ctx context.Context, c rest.Interface) (gv schema.GroupVersion, ok bool) {
	for _, gv := range cnpVersions {
		if len(served(ctx, c, gv, "clusternetworkpolicies")) > 0 {
			return gv, true
		}
	}
	return cnpVersions[0], false
}
