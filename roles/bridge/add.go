package bridge

import (
	"context"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/internal/fault"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nft"
	"github.com/cnibox/cnibox/roles/internal/attach"
	"github.com/cnibox/cnibox/store"
)

func add(ctx context.Context, a *cniplug.Args, c *Conf) (_ types.Result, err error) {
	if c.DisableContainerInterface && a.Conf.IPAM.Type != "" {
		// The reference refuses it too: a down interface takes no routes.
		return nil, cniplug.ConfError("disableContainerInterface", "a pod interface left down cannot take the addresses and routes of ipam %q: remove the ipam section or disableContainerInterface", a.Conf.IPAM.Type)
	}
	// A leftover pair of this attachment goes with its port's checks.
	hostName := c.HostVethName(a.ContainerID, a.IfName)
	v, err := attach.BeginVethADD(a, hostName, deletePortChecks)
	if err != nil {
		return nil, err
	}
	defer v.Close()
	pod, host, mac := v.Pod, v.Host, v.MAC

	var undo cniplug.Undo
	defer undo.Finish(&err)

	var br, hv, pv netops.Link
	var plan *addrPlan // IPAM's addresses, made before the links but with dhcp
	makeLinks := func() error {
		var err error
		br, err = host.EnsureBridge(netops.BridgeOpts{Name: c.Bridge, MTU: c.MTU, MAC: bridgeMAC(c.Bridge), PromiscMode: c.PromiscMode, VlanFiltering: c.Vlan != 0 || len(c.vlans) > 0})
		if err != nil {
			return cniplug.Errorf(types.ErrIOFailure, "bridge %q: %w", c.Bridge, err)
		}
		fault.Point("bridge/add/after-bridge")
		hv, pv, err = attach.CreateVeth(host, &undo, netops.VethOpts{
			HostName: hostName, PeerName: a.IfName, Peer: pod, MTU: c.MTU, PeerMAC: mac, Master: c.Bridge, IPv6: vethIPv6(a, plan),
		})
		if err != nil {
			return err
		}
		fault.Point("bridge/add/after-veth")
		if err := setupPort(host, c, &undo, hostName, pv); err != nil {
			return err
		}
		if c.DisableContainerInterface {
			if err := pod.SetLinkDown(a.IfName); err != nil {
				return cniplug.Errorf(types.ErrIOFailure, "leave %s down in the pod (disableContainerInterface): %w", a.IfName, err)
			}
		}
		a.Mark("veth")
		return nil
	}
	// DHCP asks the LAN's server through the pod's interface: with a dhcp
	// IPAM the bridge and the veth come first (the reference's order for
	// every IPAM).
	linksFirst := a.Conf.IPAM.Type == "dhcp"
	if linksFirst {
		if err := makeLinks(); err != nil {
			return nil, err
		}
	}

	// Otherwise the address reservation and the endpoint record first, in one store
	// transaction, before any kernel work: an exhausted pool fails before
	// anything is made, and a call killed later leaves a record that DEL and
	// GC find.
	res := &current.Result{CNIVersion: current.ImplementedSpecVersion}
	_, err = attach.ReserveUndone(ctx, a, c.DataDir, &undo, func(ipamRes *current.Result) (store.Endpoint, error) {
		if ipamRes != nil {
			plan = planAddresses(a, c, ipamRes, res)
		}
		ep := attach.VethEndpoint(a, res, hostName, mac, c.IPMasq)
		ep.Bridge = c.Bridge
		if plan != nil {
			plan.recordGateways(&ep)
		}
		return ep, nil
	})
	if err != nil {
		return nil, err
	}
	fault.Point("bridge/add/after-ipam")

	if !linksFirst {
		if err := makeLinks(); err != nil {
			return nil, err
		}
	}

	res.Interfaces = []*current.Interface{
		{Name: br.Name, Mac: br.MAC.String()},
		{Name: hv.Name, Mac: hv.MAC.String()},
		{Name: pv.Name, Mac: pv.MAC.String(), Sandbox: a.Netns},
	}
	pending := false
	if plan != nil {
		if pending, err = attach.PolicyPending(host, &undo, a, plan.addrs); err != nil {
			return nil, err
		}
		if attach.SpoofCheckOn(c.IPSpoofChk) {
			if err := attach.SourceCheck(host, &undo, nft.SrcCheckBridge, hostName, plan.addrs); err != nil {
				return nil, err
			}
		}
		if err := applyAddresses(host, pod, a, c, plan); err != nil {
			return nil, err
		}
		fault.Point("bridge/add/after-addresses")
		if c.IPMasq {
			if err := attach.Masquerade(host, &undo, a.Conf.Name, plan.addrs); err != nil {
				return nil, err
			}
			fault.Point("bridge/add/after-masq")
		}
		a.Mark("addresses")
	}

	if err := c.attachHook(ctx, &undo, &Attachment{Args: a, Conf: c, Host: host, Pod: pod, Bridge: br, HostVeth: hv, PodVeth: pv, Result: res}); err != nil {
		return nil, err
	}
	undo.Discard()
	if pending {
		attach.PolicyAdmit(ctx, a, plan.addrs) // done: placed now, not at its status update
	}
	return res, nil
}

// vethIPv6 is the IPv6 of the pod's veth (attach.VethIPv6) for the planned
// addresses: none for a dhcp IPAM, whose links come before its addresses
// and which gives IPv4 only; the kernel's without an IPAM (the pod's
// addresses are someone else's business, and so is its IPv6).
func vethIPv6(a *cniplug.Args, plan *addrPlan) netops.VethIPv6 {
	switch {
	case a.Conf.IPAM.Type == "dhcp":
		return netops.VethIPv6None
	case plan == nil:
		return netops.VethIPv6Kernel
	}
	return attach.VethIPv6(plan.addrs)
}
