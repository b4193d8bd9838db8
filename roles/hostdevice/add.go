package hostdevice

import (
	"context"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/roles/internal/attach"
	"github.com/cnibox/cnibox/roles/internal/lower"
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
	pod, host, err := attach.OpenNamespaces(a.Netns)
	if err != nil {
		return nil, err
	}
	defer pod.Close()
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
	l, err := moveIn(host, pod, a.IfName, dev.Name)
	if err != nil {
		return nil, err
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
