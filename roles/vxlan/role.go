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

// Role is the "vxlan" role. Every verb hands the flannel role this call's
// config with the subnet file resolved: ADD, CHECK and STATUS only once the
// agent is ready, DEL and GC whether or not it is.
var Role = &cniplug.Role{
	Name: "vxlan",
	About: "vxlan attaches the pod to cnibox's VXLAN overlay: it reads the lease that cnibox-agent holds for this node " +
		"(from cnibox's store, or a subnet file) and hands the attachment to the flannel role (bridge + host-local on " +
		"the node's subnet). Until the agent holds a lease and its device is up, ADD fails with code 11 and STATUS with 50.",
	// ADD, CHECK and STATUS need a ready overlay (readyConf), DEL and GC
	// do not (delegateConf).
	Verbs: &cniplug.ConfVerbs[[]byte]{Parse: readyBusy, Add: add, Check: check,
		ParseDel: delegateConf, Del: del, ParseGC: delegateConf, GC: gc,
		ParseStatus: readyNotReady, Status: status},

	Known: &known,
}

func add(ctx context.Context, a *cniplug.Args, conf []byte) (types.Result, error) {
	res, err := a.DelegateAdd(ctx, delegateType, conf)
	if err != nil {
		return nil, fmt.Errorf("vxlan: %w", err)
	}
	fault.Point("vxlan/add/after-flannel")
	return res, nil
}

// del needs no ready agent: the flannel role replays what ADD recorded.
func del(ctx context.Context, a *cniplug.Args, conf []byte) error {
	if err := a.DelegateDel(ctx, delegateType, conf); err != nil {
		return err
	}
	fault.Point("vxlan/del/after-flannel")
	return nil
}

// check, gc and status hand the flannel role its config.
func check(ctx context.Context, a *cniplug.Args, conf []byte) error {
	return a.DelegateCheck(ctx, delegateType, conf)
}

func gc(ctx context.Context, a *cniplug.Args, conf []byte) error {
	return a.DelegateGC(ctx, delegateType, conf)
}

func status(ctx context.Context, a *cniplug.Args, conf []byte) error {
	return a.DelegateStatus(ctx, delegateType, conf)
}

// readyBusy and readyNotReady are the parse of ADD and CHECK, and of STATUS
// (see readyConf).
func readyBusy(a *cniplug.Args) ([]byte, error)     { return readyConf(a, cniplug.CodeBusy) }
func readyNotReady(a *cniplug.Args) ([]byte, error) { return readyConf(a, cniplug.CodeNotReady) }

// readyConf is the flannel config with the subnet file of the agent's
// lease, once the overlay is ready; a not-ready overlay is the error with
// notReady's code (11 busy, 50 on STATUS).
func readyConf(a *cniplug.Args, notReady uint) ([]byte, error) {
	c, err := parseConf(a)
	if err != nil {
		return nil, err
	}
	l, err := findLease(a, c)
	if err != nil {
		return nil, readyErr(err, notReady)
	}
	return flannelConf(a.StdinData, l.subnetFile)
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
