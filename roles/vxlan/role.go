package vxlan

import (
	"context"
	"fmt"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/internal/fault"
)

// delegateType is the role the vxlan role hands the attachment to.
const delegateType = "flannel"

// Role is the "vxlan" role.
var Role = &cniplug.Role{
	Name: "vxlan",
	About: "vxlan attaches the pod to cnibox's VXLAN overlay: it reads the lease that cnibox-agent holds for this node " +
		"(from cnibox's store, or a subnet file) and hands the attachment to the flannel role (bridge + host-local on " +
		"the node's subnet). Until the agent holds a lease and its device is up, ADD fails with code 11 and STATUS with 50.",
	Add:    add,
	Del:    del,
	Check:  check,
	GC:     gc,
	Status: status,
}

func add(ctx context.Context, a *cniplug.Args) (types.Result, error) {
	c, err := parseConf(a)
	if err != nil {
		return nil, err
	}
	l, err := findLease(a, c)
	if err != nil {
		return nil, readyErr(err, cniplug.CodeBusy)
	}
	conf, err := flannelConf(a.StdinData, l.subnetFile)
	if err != nil {
		return nil, err
	}
	res, err := a.DelegateAdd(ctx, delegateType, conf)
	if err != nil {
		return nil, fmt.Errorf("vxlan: %w", err)
	}
	fault.Point("vxlan/add/after-flannel")
	return res, nil
}

// del needs no ready agent: the flannel role replays what ADD recorded.
func del(ctx context.Context, a *cniplug.Args) error {
	conf, err := delegateConf(a)
	if err != nil {
		return err
	}
	if err := a.DelegateDel(ctx, delegateType, conf); err != nil {
		return err
	}
	fault.Point("vxlan/del/after-flannel")
	return nil
}

func check(ctx context.Context, a *cniplug.Args) error {
	c, err := parseConf(a)
	if err != nil {
		return err
	}
	l, err := findLease(a, c)
	if err != nil {
		return readyErr(err, cniplug.CodeBusy)
	}
	conf, err := flannelConf(a.StdinData, l.subnetFile)
	if err != nil {
		return err
	}
	return a.DelegateCheck(ctx, delegateType, conf)
}

func gc(ctx context.Context, a *cniplug.Args) error {
	conf, err := delegateConf(a)
	if err != nil {
		return err
	}
	return a.DelegateGC(ctx, delegateType, conf)
}

// status is not ready (50) until the agent holds a lease and its device is
// up; then it is the delegate's (are addresses left?).
func status(ctx context.Context, a *cniplug.Args) error {
	c, err := parseConf(a)
	if err != nil {
		return err
	}
	l, err := findLease(a, c)
	if err != nil {
		return readyErr(err, cniplug.CodeNotReady)
	}
	conf, err := flannelConf(a.StdinData, l.subnetFile)
	if err != nil {
		return err
	}
	return a.DelegateStatus(ctx, delegateType, conf)
}

// delegateConf is the flannel config for DEL and GC, which must work whether
// or not the agent is running: the subnet file is the configured one, else
// the agent's recorded one, else the default.
func delegateConf(a *cniplug.Args) ([]byte, error) {
	c, err := parseConf(a)
	if err != nil {
		return nil, err
	}
	sf := c.SubnetFile
	if sf == "" {
		if l, _ := findLease(a, c); l != nil {
			sf = l.subnetFile
		}
	}
	if sf == "" {
		sf = defaultSubnetFile
	}
	return flannelConf(a.StdinData, sf)
}
