package tap

import (
	"context"
	"strconv"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/roles/internal/podns"
	"github.com/cnibox/cnibox/store"
)

// add checks the bridge, then runs lower's ADD with the tap as the device:
// the record (with the tap's options), the addresses, the tap made in the
// pod (down, on the bridge), the plan on it; a failure undoes it all.
func add(ctx context.Context, a *cniplug.Args, c conf) (types.Result, error) {
	pod, err := podns.Open(a.Netns)
	if err != nil {
		return nil, err
	}
	defer pod.Close()
	if c.Bridge != "" {
		if err := checkBridge(pod, c.Bridge); err != nil {
			return nil, err
		}
	}
	mac := c.RequestedMAC()
	if mac == nil {
		// Picked here so the endpoint record holds it before the tap exists.
		mac = netops.RandomMAC()
	}
	record := func(ep *store.Endpoint) {
		ep.MAC = mac.String()
		ep.Extra = map[string]string{}
		if c.Bridge != "" {
			ep.Extra["bridge"] = c.Bridge
		}
		if c.MultiQueue {
			ep.Extra["multiQueue"] = "true"
		}
		for k, v := range map[string]*uint32{"owner": c.Owner, "group": c.Group} {
			if v != nil {
				ep.Extra[k] = strconv.FormatUint(uint64(*v), 10)
			}
		}
	}
	create := func() (netops.SubLink, error) {
		t, err := pod.EnsureTap(netops.TapOpts{Name: a.IfName, MTU: c.MTU, MAC: mac, MultiQueue: c.MultiQueue,
			Owner: c.Owner, Group: c.Group, Master: c.Bridge, Label: c.Label})
		return netops.SubLink{Link: t.Link}, err
	}
	return spec.AttachBare(ctx, a, c.Conf, pod, record, create)
}

// checkBridge refuses a "bridge" that is not a bridge of the pod.
func checkBridge(pod *netops.Handle, name string) error {
	l, err := pod.LinkByName(name)
	if err != nil {
		return cniplug.ConfError("bridge", "%q: no such interface in the pod's namespace (%v): the tap goes on a bridge of the pod, which the runtime makes first; fix \"bridge\" or drop it", name, err)
	}
	if l.Kind != "bridge" {
		return cniplug.ConfError("bridge", "%q in the pod is a %q device, not a bridge: name a bridge of the pod or drop \"bridge\"", name, l.Kind)
	}
	return nil
}
