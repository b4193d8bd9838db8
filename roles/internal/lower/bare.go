package lower

import (
	"context"
	"errors"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/roles/internal/attach"
	"github.com/cnibox/cnibox/roles/internal/podns"
	"github.com/cnibox/cnibox/store"
)

// AddBare is the ADD of a device kind without a master (dummy), once the
// config is parsed: s.Create makes it in the pod, on the pod's handle, with
// only o.Name set. Everything else is as for a device on a master: the
// endpoint record and the addresses before the device, the plan put on it,
// undo on failure; Del and GC are every kind's, and CheckBare checks the
// device, its addresses and routes. The config's master, mode, mtu and mac
// are not used.
func (s *Spec) AddBare(ctx context.Context, a *cniplug.Args, c *Conf) (types.Result, error) {
	return s.addBare(ctx, a, c)
}

func (s *Spec) addBare(ctx context.Context, a *cniplug.Args, c *Conf) (types.Result, error) {
	pod, err := podns.Open(a.Netns)
	if err != nil {
		return nil, err
	}
	defer pod.Close()
	return s.attachDevice(ctx, a, c, pod, device{
		create: func() (netops.SubLink, error) { return s.Create(pod, netops.SubLinkOpts{Name: a.IfName}) },
	})
}

// device is how attachDevice makes the pod's device and what it records.
type device struct {
	// prev is the result whose addresses the pod gets without IPAM (a
	// chained role's prevResult), or nil.
	prev *current.Result
	// master is the device's master, named in a failed create's error (""
	// without one).
	master string
	// record adds the role's facts to the endpoint record (optional).
	record func(*store.Endpoint)
	// create makes the device in the pod, down, under CNI_IFNAME.
	create func() (netops.SubLink, error)
}

// attachDevice is an ADD once the config is parsed and the pod opened: it
// refuses a CNI_IFNAME that exists, reserves the addresses and writes the
// endpoint record, creates the device, and puts the addresses, up and the
// routes on it. A failure undoes the earlier steps.
func (s *Spec) attachDevice(ctx context.Context, a *cniplug.Args, c *Conf, pod *netops.Handle, d device) (_ types.Result, err error) {
	if _, err := pod.LinkByName(a.IfName); err == nil {
		return nil, cniplug.Errorf(cniplug.CodeIfaceExists, "interface %q already exists in the pod namespace %s: pick another CNI_IFNAME or DEL the attachment that made it", a.IfName, a.Netns)
	}
	var undo cniplug.Undo
	defer undo.Finish(&err)
	res := &current.Result{CNIVersion: current.ImplementedSpecVersion}
	var l netops.SubLink
	createDevice := func() error {
		var err error
		l, err = d.create()
		if errors.Is(err, netops.ErrExists) {
			return cniplug.Errorf(cniplug.CodeIfaceExists, "create %s %q: %w", s.Kind, a.IfName, err)
		}
		if err != nil && d.master != "" {
			return cniplug.Errorf(types.ErrIOFailure, "create %s %q on %q: %w", s.Kind, a.IfName, d.master, err)
		}
		if err != nil {
			return cniplug.Errorf(types.ErrIOFailure, "create %s %q: %w", s.Kind, a.IfName, err)
		}
		undo.Push(func() { _ = pod.DeleteLink(a.IfName) })
		return nil
	}
	// DHCP asks the LAN's server through the pod's device: it must exist
	// before IPAM runs (the reference's order for every IPAM).
	deviceFirst := a.Conf.IPAM.Type == "dhcp"
	if deviceFirst {
		if err := createDevice(); err != nil {
			return nil, err
		}
	}
	var p *plan
	_, err = attach.Reserve(ctx, a, c.DataDir, func(ipamRes *current.Result) (store.Endpoint, error) {
		if ipamRes == nil {
			ipamRes = d.prev
		}
		p = planOf(a, c, ipamRes, res)
		ep := attach.NewEndpoint(a, res)
		if d.record != nil {
			d.record(&ep)
		}
		return ep, nil
	})
	if err != nil {
		return nil, err
	}
	undo.Push(func() { _ = attach.Release(context.WithoutCancel(ctx), a, c.DataDir, nil) })
	if !deviceFirst {
		if err := createDevice(); err != nil {
			return nil, err
		}
	}
	a.Mark(s.Kind)
	res.Interfaces = []*current.Interface{{Name: a.IfName, Mac: l.MAC.String(), Sandbox: a.Netns}}
	if err := s.apply(pod, a, p); err != nil {
		return nil, err
	}
	a.Mark("addresses")
	undo.Discard()
	return res, nil
}

// checkBare verifies the attachment against prevResult: the pod's device
// is of the kind, up, with the MAC, addresses and routes of the ADD result.
func (s *Spec) checkBare(ctx context.Context, a *cniplug.Args, _ *Conf) error {
	prev, podIdx, err := attach.Prev(ctx, a)
	if err != nil {
		return err
	}
	pod, err := podns.Open(a.Netns)
	if err != nil {
		return err
	}
	defer pod.Close()
	_, err = checkDevice(pod, a, s.Kind, prev, podIdx)
	return err
}

// checkDevice checks the pod's device against prev: kind, up, MAC,
// addresses and routes. It returns the device.
func checkDevice(pod *netops.Handle, a *cniplug.Args, kind string, prev *current.Result, podIdx int) (netops.SubLink, error) {
	l, err := attach.CheckPodLink(pod, a, kind, prev.Interfaces[podIdx])
	if err != nil {
		return l, err
	}
	if err := attach.CheckPodAddrs(pod, a.IfName, prev, podIdx); err != nil {
		return l, err
	}
	return l, attach.CheckPodRoutes(pod, a.IfName, prev)
}
