package multi

import (
	"context"
	"encoding/json"
	"slices"
	"time"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/roles/internal/delegate"
)

// multiK8sDelTimeout bounds DEL's look at the pod when it has no record.
const multiK8sDelTimeout = 10 * time.Second

// multiK8sDelegates completes, on a DEL that finds no record, the networks
// from the pod as ADD resolves them (the clusterNetwork NAD,
// defaultNetworks, the default-network and networks annotations, the
// auxiliary chain), as Multus' DEL does when its cache has no entry: a pod
// that Multus attached before cnibox took its place, or one whose record
// is lost, then has every network deleted, not only the primary (whose
// IPAM reservations would otherwise stay). Best effort, as Multus: when
// the pod path is off, the pod is gone or a network does not resolve, DEL
// goes on with the config's networks and the log says why.
func multiK8sDelegates(ctx context.Context, a *cniplug.Args, at *multiAttachment) {
	if at.recorded || at.c == nil {
		return
	}
	c := *at.c
	c.Delegates = slices.Clone(at.c.Delegates)
	ctx, cancel := context.WithTimeout(ctx, multiK8sDelTimeout)
	defer cancel()
	pod, err := multiK8sSelect(ctx, a, &c)
	if err == nil && pod != nil {
		err = c.appendAux(a.Conf.CNIVersion)
	}
	switch {
	case err != nil:
		delegate.Log(a, "multi DEL: no record for container %s ifname %s, and the pod's networks do not resolve (%v): deleting the config's %d network(s) only", a.ContainerID, a.IfName, err, len(at.delegates))
		return
	case pod == nil:
		return
	}
	results := make([]json.RawMessage, len(c.Delegates))
	if len(at.results) > 0 && len(results) > 0 {
		results[0] = at.results[0] // the runtime's prevResult, the primary's
	}
	delegate.Log(a, "multi DEL: no record for container %s ifname %s: deleting the %d network(s) of pod %s as its annotations name them", a.ContainerID, a.IfName, len(c.Delegates), pod)
	at.c, at.delegates, at.results = &c, c.Delegates, results
}
