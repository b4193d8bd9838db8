package hostlocal

import (
	"context"
	"net"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/internal/fault"
	"github.com/cnibox/cnibox/ipam"
	"github.com/cnibox/cnibox/store"
)

func add(_ context.Context, a *cniplug.Args) (types.Result, error) {
	cfg, err := loadConfig(a, loadOptions{ranges: true})
	if err != nil {
		return nil, err
	}
	requested, err := a.RequestedIPs()
	if err != nil {
		return nil, err
	}
	res := &current.Result{CNIVersion: current.ImplementedSpecVersion}
	if cfg.ResolvConf != "" {
		if res.DNS, err = parseResolvConf("ipam.resolvConf", cfg.ResolvConf); err != nil {
			return nil, err
		}
	}
	req := ipam.Request{
		Network:     cfg.Network,
		ContainerID: a.ContainerID,
		IfName:      a.IfName,
		Pod:         a.CNIArgs.Pod(),
		Sets:        cfg.Sets,
		Requested:   requested,
		Sticky:      cfg.Sticky,
	}
	var allocs []ipam.Allocation
	err = withStore(a, cfg, false, func(s *store.Store) error {
		return s.IPAM(cfg.Network, func(tx *store.IPAMTx) (err error) {
			if err := reclaimAfterReboot(a, tx, req); err != nil {
				return err
			}
			allocs, err = allocate(a, tx, req)
			return err
		})
	})
	if err != nil {
		return nil, err
	}
	fault.Point("hostlocal/add/after-reserve")
	for _, al := range allocs {
		ipc := &current.IPConfig{Address: ipNet(al.Addr)}
		if al.Gateway.IsValid() {
			ipc.Gateway = net.IP(al.Gateway.AsSlice())
		}
		res.IPs = append(res.IPs, ipc)
	}
	for _, r := range cfg.Routes {
		res.Routes = append(res.Routes, r.cni())
	}
	return res, nil
}
