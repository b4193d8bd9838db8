package loopback

import (
	"context"
	"errors"
	"net"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/roles/internal/podns"
)

// Role is the "loopback" role: it brings lo up in the pod.
var Role = &cniplug.Role{
	Name:  "loopback",
	About: "loopback brings the pod's loopback interface (lo) up on ADD and down on DEL.",
	Verbs: &cniplug.ConfVerbs[cniplug.NoConf]{Add: loopbackAdd, Check: loopbackCheck, Del: loopbackDel},

	Known: &known,
}

func loopbackAdd(_ context.Context, a *cniplug.Args, _ cniplug.NoConf) (types.Result, error) {
	h, err := podns.Open(a.Netns)
	if err != nil {
		return nil, err
	}
	defer h.Close()
	if err := h.SetLinkUp("lo"); err != nil {
		return nil, cniplug.WithCode(types.ErrIOFailure, err)
	}
	if prev, err := a.Conf.PrevResult(); err != nil || prev != nil {
		return prev, err
	}
	addrs, err := h.Addrs("lo")
	if err != nil {
		return nil, cniplug.WithCode(types.ErrIOFailure, err)
	}
	res := &current.Result{
		CNIVersion: current.ImplementedSpecVersion,
		Interfaces: []*current.Interface{{Name: "lo", Mac: "00:00:00:00:00:00", Sandbox: a.Netns}},
	}
	zero := 0
	for _, p := range addrs {
		res.IPs = append(res.IPs, &current.IPConfig{Interface: &zero, Address: net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}})
	}
	return res, nil
}

// loopbackCheck verifies that lo is up in the pod.
func loopbackCheck(_ context.Context, a *cniplug.Args, _ cniplug.NoConf) error {
	return podns.In(a.Netns, func(h *netops.Handle) error {
		l, err := h.LinkByName("lo")
		if err != nil {
			return cniplug.WithCode(types.ErrIOFailure, err)
		}
		if !l.Up {
			return cniplug.Errorf(types.ErrIOFailure, "lo is down in %s", a.Netns)
		}
		return nil
	})
}

func loopbackDel(_ context.Context, a *cniplug.Args, _ cniplug.NoConf) error {
	if a.Netns == "" {
		return nil
	}
	h, err := netops.Open(a.Netns)
	if err != nil {
		return nil // the namespace is gone, and lo with it
	}
	defer h.Close()
	if err := h.SetLinkDown("lo"); err != nil && !errors.Is(err, netops.ErrNotFound) {
		return cniplug.WithCode(types.ErrIOFailure, err)
	}
	return nil
}
