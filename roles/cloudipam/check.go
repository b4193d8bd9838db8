package cloudipam

import (
	"context"
	"errors"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/ipam"
	"github.com/cnibox/cnibox/store"
)

// check verifies, from the cache (the provider is not asked), that the
// attachment still holds an address in every IP family of the pools.
func check(_ context.Context, a *cniplug.Args, c *config) error {
	held := false
	err := c.View(a, func(tx *store.IPAMTx) error {
		cache, ok := CacheOf(tx)
		if !ok {
			return nil
		}
		sets, _, err := ipam.PoolSets(poolsField, pools(c, &cache))
		if err != nil {
			return err
		}
		_, missing := ipam.Held(tx, a.ContainerID, a.IfName, sets)
		held = len(sets) > 0 && len(missing) == 0
		return nil
	})
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return err
	}
	if !held {
		return cniplug.Errorf(types.ErrUnknownContainer, "network %q: container %s interface %s holds no address of the cloud pools: it was released (DEL or cnibox gc); re-create the container", c.Network, a.ContainerID, a.IfName)
	}
	return nil
}
