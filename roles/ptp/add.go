package ptp

import (
	"context"
	"errors"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nft"
	"github.com/cnibox/cnibox/roles/internal/attach"
	"github.com/cnibox/cnibox/store"
)

func add(ctx context.Context, a *cniplug.Args, c *Conf) (_ types.Result, err error) {
	mac, err := a.RequestedMAC()
	if err != nil {
		return nil, err
	}
	if mac == nil {
		// Picked here so the endpoint record holds it before the veth exists.
		mac = netops.RandomMAC()
	}
	pod, host, err := attach.OpenNamespaces(a.Netns)
	if err != nil {
		return nil, err
	}
	defer pod.Close()
	defer host.Close()
	hostName := attach.HostVethName(a.ContainerID, a.IfName)
	if l, err := pod.LinkByName(a.IfName); err == nil && !attach.RemoveLeftoverVethWith(host, l, hostName, deleteSourceCheck) {
		return nil, cniplug.Errorf(cniplug.CodeIfaceExists, "interface %q already exists in the pod namespace %s: pick another CNI_IFNAME or DEL the attachment that made it", a.IfName, a.Netns)
	}

	var undo cniplug.Undo
	defer undo.Finish(&err)

	res := &current.Result{CNIVersion: current.ImplementedSpecVersion}
	var p *plan
	_, err = attach.Reserve(ctx, a, c.DataDir, func(ipamRes *current.Result) (store.Endpoint, error) {
		var err error
		if p, err = planOf(a, c, ipamRes, res); err != nil {
			return store.Endpoint{}, err
		}
		ep := attach.NewEndpoint(a, res)
		ep.HostVeth, ep.MAC = hostName, mac.String()
		if c.IPMasq {
			ep.Extra = map[string]string{"ipMasq": "true"}
		}
		return ep, nil
	})
	if err != nil {
		return nil, err
	}
	undo.Push(func() { _ = attach.Release(context.WithoutCancel(ctx), a, c.DataDir, nil) })

	if err := attach.EnableForwarding(host, p.pod); err != nil {
		return nil, err
	}
	hv, pv, err := host.EnsureVeth(netops.VethOpts{HostName: hostName, PeerName: a.IfName, Peer: pod, MTU: c.MTU, PeerMAC: mac, IPv6: attach.VethIPv6(p.pod)})
	if errors.Is(err, netops.ErrExists) {
		return nil, cniplug.Errorf(cniplug.CodeIfaceExists, "create veth %s/%s: %w", hostName, a.IfName, err)
	}
	if err != nil {
		return nil, cniplug.Errorf(types.ErrIOFailure, "create veth %s/%s: %w", hostName, a.IfName, err)
	}
	undo.Push(func() { _ = host.DeleteLink(hostName) })
	a.Mark("veth")
	res.Interfaces = []*current.Interface{
		{Name: hv.Name, Mac: hv.MAC.String()},
		{Name: pv.Name, Mac: pv.MAC.String(), Sandbox: a.Netns},
	}
	pending, err := attach.PolicyPending(host, &undo, a, p.pod)
	if err != nil {
		return nil, err
	}
	if attach.SpoofCheckOn(c.IPSpoofChk) {
		if err := attach.SourceCheck(host, &undo, nft.SrcCheckRouted, hostName, p.pod); err != nil {
			return nil, err
		}
	}
	if err := apply(host, pod, a, p); err != nil {
		return nil, err
	}
	a.Mark("addresses")
	if c.IPMasq {
		if err := host.NFT().EnsureMasq(a.Conf.Name, p.pod); err != nil {
			return nil, cniplug.Errorf(types.ErrIOFailure, "ipMasq: %w", err)
		}
		undo.Push(func() { _ = host.NFT().DeleteMasq(p.hostRoute) })
	}
	undo.Discard()
	if pending {
		attach.PolicyAdmit(ctx, a, p.pod) // done: placed now, not at its status update
	}
	return res, nil
}

// apply puts the plan in the kernel: the pod's addresses and routes, the
// gateways on the host end and the node's routes to the pod.
func apply(host, pod *netops.Handle, a *cniplug.Args, p *plan) error {
	hostName := attach.HostVethName(a.ContainerID, a.IfName)
	if err := attach.EnsurePodAddrs(pod, a.IfName, p.pod, netops.AddrOpts{NoDAD: true, NoPrefixRoute: true}); err != nil {
		return err
	}
	if err := attach.EnsurePodRoutes(pod, p.routes); err != nil {
		return err
	}
	for _, gw := range p.hostAddrs {
		if err := host.EnsureAddr(hostName, gw, netops.AddrOpts{NoDAD: true}); err != nil {
			return cniplug.Errorf(types.ErrIOFailure, "add gateway %s to host veth %s: %w", gw, hostName, err)
		}
	}
	for _, ip := range p.hostRoute {
		if err := host.EnsureHostRoute(hostName, ip); err != nil {
			return cniplug.Errorf(types.ErrIOFailure, "route pod address %s to %s: %w", ip, hostName, err)
		}
	}
	return nil
}
