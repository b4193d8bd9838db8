package lower

import (
	"context"
	"fmt"
	"net/netip"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/roles/internal/attach"
	"github.com/cnibox/cnibox/store"
)

// Add is the ADD of a device of c's kind (the Spec that parsed c) on a
// master.
func Add(ctx context.Context, a *cniplug.Args, c *Conf) (types.Result, error) {
	s := c.spec
	prev, err := s.fromPrev(a, c)
	if err != nil {
		return nil, err
	}
	pod, mh, closeNS, err := s.open(a, c)
	if err != nil {
		return nil, err
	}
	defer closeNS()
	if err := vethMaster(mh, c); err != nil {
		return nil, err
	}
	if s.MAC && c.mac == nil && c.Mode != "passthru" {
		// Picked here so the endpoint record holds it before the device
		// exists (a passthru device keeps the master's).
		c.mac = netops.RandomMAC()
	}
	into := pod
	if c.LinkInContainer {
		into = nil
	}
	return s.attachDevice(ctx, a, c, pod, device{
		prev:   prev,
		master: c.Master,
		record: func(ep *store.Endpoint) {
			ep.Extra = map[string]string{"master": c.Master}
			if c.Mode != "" {
				ep.Extra["mode"] = c.Mode
			}
			if c.LinkInContainer {
				ep.Extra["linkInContainer"] = "true"
			}
			if c.mac != nil {
				ep.MAC = c.mac.String()
			}
			if s.Record != nil {
				s.Record(ep)
			}
		},
		create: func() (netops.SubLink, error) {
			return s.Create(mh, netops.SubLinkOpts{Name: a.IfName, Master: c.Master, Into: into, Mode: c.Mode, MTU: c.MTU, MAC: c.mac, BCQueueLen: c.BCQueueLen})
		},
	})
}

// fromPrev applies a chained role's prevResult (see Spec.Chained): it
// fills in the master and returns the result whose addresses the pod gets
// when there is no IPAM (nil otherwise).
func (s *Spec) fromPrev(a *cniplug.Args, c *Conf) (*current.Result, error) {
	if !s.Chained {
		return nil, nil
	}
	prev, err := a.Conf.PrevResult()
	if err != nil || prev == nil {
		return nil, err
	}
	if c.Master == "" {
		if len(prev.Interfaces) != 1 || prev.Interfaces[0].Name == "" {
			return nil, cniplug.ConfError("master", "not set, and prevResult does not have exactly one named interface to take it from: set \"master\"")
		}
		c.Master = prev.Interfaces[0].Name
	}
	if a.Conf.IPAM.Type != "" || len(prev.IPs) == 0 {
		return nil, nil
	}
	return prev, nil
}

// plan is what goes on the pod's device: its addresses, then (once it is
// up) the routes.
type plan struct {
	addrs  []netip.Prefix
	routes []netops.Route
}

// planOf works out from IPAM's result (nil without IPAM) what the pod gets
// and fills res's IPs (on interface 0), routes and DNS with it.
func planOf(a *cniplug.Args, c *Conf, ipamRes, res *current.Result) *plan {
	p := &plan{}
	if ipamRes != nil {
		var gws map[bool]netip.Addr
		p.addrs, gws = attach.PodAddrs(ipamRes, res, 0)
		p.routes = attach.PodRoutes(a.IfName, ipamRes.Routes, gws)
		res.Routes = ipamRes.Routes
		res.DNS = ipamRes.DNS
	}
	res.DNS = attach.PickDNS(c.DNS, res.DNS)
	return p
}

// apply puts the plan on the pod's device: the announcements asked for,
// the addresses, up (which announces them), then the routes.
func (s *Spec) apply(pod *netops.Handle, a *cniplug.Args, p *plan) error {
	if s.Notify && len(p.addrs) > 0 {
		// Best effort, as in the reference: IPv6 may be off in the pod.
		_ = pod.SetSysctls(
			netops.SysctlSetting{Key: fmt.Sprintf("net/ipv4/conf/%s/arp_notify", a.IfName), Value: "1"},
			netops.SysctlSetting{Key: fmt.Sprintf("net/ipv6/conf/%s/ndisc_notify", a.IfName), Value: "1"},
		)
	}
	if err := attach.EnsurePodAddrs(pod, a.IfName, p.addrs, netops.AddrOpts{NoDAD: true}); err != nil {
		return err
	}
	if err := pod.SetLinkUp(a.IfName); err != nil {
		return cniplug.Errorf(types.ErrIOFailure, "set %s up in the pod: %w", a.IfName, err)
	}
	return attach.EnsurePodRoutes(pod, p.routes)
}
