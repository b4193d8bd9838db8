package hostdevice

import (
	"context"
	"errors"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/roles/internal/attach"
	"github.com/cnibox/cnibox/roles/internal/lower"
	"github.com/cnibox/cnibox/roles/internal/podns"
	"github.com/cnibox/cnibox/store"
)

// add finds the device on the node, reserves the addresses and writes the
// endpoint record with what the device is (refusing one that another
// attachment holds), moves it into the pod as CNI_IFNAME with its node name
// as alias, and puts the addresses, up and the routes on it. A failure
// undoes the earlier steps: the device goes back as it was.
func add(ctx context.Context, a *cniplug.Args, c *conf) (_ types.Result, err error) {
	t, err := targetOf(c)
	if err != nil {
		return nil, err
	}
	dpdk, err := t.dpdk()
	if err != nil {
		return nil, err
	}
	pod, err := podns.Open(a.Netns)
	if err != nil {
		return nil, err
	}
	defer pod.Close()
	host, err := podns.Host()
	if err != nil {
		return nil, err
	}
	defer host.Close()
	if _, err := pod.LinkByName(a.IfName); err == nil {
		return nil, cniplug.Errorf(cniplug.CodeIfaceExists, "interface %q already exists in the pod namespace %s: pick another CNI_IFNAME or DEL the attachment that made it", a.IfName, a.Netns)
	}
	var dev netops.DeviceState
	if !dpdk {
		if dev, err = deviceOnNode(a, c, host, t); err != nil {
			return nil, err
		}
	}

	var undo cniplug.Undo
	defer undo.Finish(&err)
	res := &current.Result{CNIVersion: current.ImplementedSpecVersion}
	var p *lower.Plan
	_, err = attach.Reserve(ctx, a, c.DataDir, func(ipamRes *current.Result) (store.Endpoint, error) {
		if h, err := holder(a, c, t, dev.Name); err != nil || h != nil {
			return store.Endpoint{}, cmpErr(err, func() error { return inUse(t, h) })
		}
		p = lower.PlanOf(a, &lower.Conf{DNS: c.DNS}, ipamRes, res)
		ep := attach.NewEndpoint(a, res)
		record(&ep, t, dev, dpdk)
		return ep, nil
	})
	if err != nil {
		return nil, err
	}
	undo.Push(func() { _ = attach.Release(context.WithoutCancel(ctx), a, c.DataDir, nil) })
	res.Interfaces = []*current.Interface{{Name: a.IfName, Sandbox: a.Netns}}
	if dpdk {
		undo.Discard()
		return res, nil
	}
	alias := dev.Name
	l, err := host.MoveLink(netops.MoveOpts{Name: dev.Name, Into: pod, NewName: a.IfName, Alias: &alias})
	if errors.Is(err, netops.ErrExists) {
		return nil, cniplug.Errorf(cniplug.CodeIfaceExists, "move %q into the pod: %w", dev.Name, err)
	}
	if err != nil {
		return nil, cniplug.Errorf(types.ErrIOFailure, "move %q into the pod: %w", dev.Name, err)
	}
	undo.Push(func() { _ = moveOut(pod, host, a.IfName, dev) })
	a.Mark("move")
	res.Interfaces[0].Mac = l.MAC.String()
	if err := spec.Apply(pod, a, p); err != nil {
		return nil, err
	}
	a.Mark("addresses")
	undo.Discard()
	return res, nil
}

// deviceOnNode returns what the device t names is on the node. One that is
// not there is code 7, naming the attachment that holds it when one does.
func deviceOnNode(a *cniplug.Args, c *conf, host *netops.Handle, t target) (netops.DeviceState, error) {
	l, err := find(host, t, c)
	if errors.Is(err, netops.ErrNotFound) {
		if h, herr := holder(a, c, t, ""); herr != nil || h != nil {
			return netops.DeviceState{}, cmpErr(herr, func() error { return inUse(t, h) })
		}
		return netops.DeviceState{}, cniplug.ConfError(t.field, "%q: no such device on the node (%v): fix %q", t.value, err, t.field)
	}
	if err != nil {
		return netops.DeviceState{}, cniplug.Errorf(types.ErrIOFailure, "find the device %s %q: %w", t.field, t.value, err)
	}
	st, err := host.DeviceStateOf(l.Name)
	if err != nil {
		return netops.DeviceState{}, cniplug.Errorf(types.ErrIOFailure, "read the state of %q: %w", l.Name, err)
	}
	return st, nil
}

// cmpErr returns err, or when it is nil, what other makes.
func cmpErr(err error, other func() error) error {
	if err != nil {
		return err
	}
	return other()
}
