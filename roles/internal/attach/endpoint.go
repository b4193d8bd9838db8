package attach

import (
	"net"
	"time"

	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/store"
)

// NewEndpoint is the store record of the attachment of call a that res
// describes (res may be nil: an interface without addresses): the pod, the
// pod's addresses, gateways, routes and DNS. The role adds its own facts
// (host veth, MAC, Extra).
func NewEndpoint(a *cniplug.Args, res *current.Result) store.Endpoint {
	ep := store.Endpoint{
		Network: a.Conf.Name, ContainerID: a.ContainerID, IfName: a.IfName, Netns: a.Netns,
		PodNamespace: string(a.CNIArgs.K8S_POD_NAMESPACE), PodName: string(a.CNIArgs.K8S_POD_NAME),
		PodUID: string(a.CNIArgs.K8S_POD_UID), Plugin: a.Conf.Type,
		Created: time.Now().UTC(), BootID: store.BootID(),
	}
	if res == nil {
		return ep
	}
	for _, ipc := range res.IPs {
		ep.IPs = append(ep.IPs, PrefixOf(ipc.Address))
		if gw := AddrOf(ipc.Gateway); gw.IsValid() {
			ep.Gateways = append(ep.Gateways, gw)
		}
	}
	for _, r := range res.Routes {
		ep.Routes = append(ep.Routes, store.Route{Dst: PrefixOf(r.Dst), GW: AddrOf(r.GW)})
	}
	ep.DNS = store.DNS{Nameservers: res.DNS.Nameservers, Domain: res.DNS.Domain, Search: res.DNS.Search, Options: res.DNS.Options}
	return ep
}

// VethEndpoint is NewEndpoint for a veth attachment: with its host end
// hostVeth, the pod end's MAC and, with ipMasq, "ipMasq": "true" in Extra
// (which `cnibox doctor` reads).
func VethEndpoint(a *cniplug.Args, res *current.Result, hostVeth string, mac net.HardwareAddr, ipMasq bool) store.Endpoint {
	ep := NewEndpoint(a, res)
	ep.HostVeth, ep.MAC = hostVeth, mac.String()
	if ipMasq {
		ep.Extra = map[string]string{"ipMasq": "true"}
	}
	return ep
}
