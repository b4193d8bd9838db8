package hostlocal

import (
	"context"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/internal/fault"
	"github.com/cnibox/cnibox/ipam"
	"github.com/cnibox/cnibox/roles/internal/ipamrole"
	"github.com/cnibox/cnibox/store"
)

func add(_ context.Context, a *cniplug.Args, cfg *config) (types.Result, error) {
	req, err := cfg.Request(a)
	if err != nil {
		return nil, err
	}
	req.Sets = cfg.Sets
	var dns types.DNS
	if cfg.ResolvConf != "" {
		if dns, err = ipamrole.ParseResolvConf("ipam.resolvConf", cfg.ResolvConf); err != nil {
			return nil, err
		}
	}
	// The reference host-local's records on the node, held locked until
	// ours are written.
	ref, err := openRefStore(a, cfg.DataDir)
	if err != nil {
		return nil, err
	}
	defer ref.close()
	if req.Taken, err = ref.taken(a.ContainerID, a.IfName); err != nil {
		return nil, err
	}
	var allocs []ipam.Allocation
	err = cfg.Update(a, func(tx *store.IPAMTx) (err error) {
		if err := reclaimAfterReboot(a, tx, req); err != nil {
			return err
		}
		allocs, err = allocate(a, tx, req)
		return err
	})
	if err != nil {
		return nil, err
	}
	if err := ref.reserve(allocs, a.ContainerID, a.IfName); err != nil {
		// the runtime's DEL releases what the store holds
		return nil, err
	}
	fault.Point("hostlocal/add/after-reserve")
	return ipamrole.Result(ipamrole.Allocated(allocs), cfg.Routes, dns), nil
}
