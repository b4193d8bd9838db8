package cloudipam

import (
	"context"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/ipam"
	"github.com/cnibox/cnibox/store"
)

// status is not ready (code 50) when a pool family has no free address, or
// when the provider cannot be reached and nothing is cached; it refreshes
// the cache like ADD.
func status(ctx context.Context, a *cniplug.Args, c *config) error {
	err := withPools(ctx, a, c, func(tx *store.IPAMTx, cache *CloudCache) error {
		return ipam.PoolsReady(tx, c.Network, poolsField, pools(c, cache))
	})
	if err == nil {
		return nil
	}
	switch cniplug.CodeOf(err) {
	case types.ErrTryAgainLater, types.ErrIOFailure, types.ErrDecodingFailure:
		return cniplug.Errorf(cniplug.CodeNotReady, "network %q: not ready: %w", c.Network, err)
	}
	return err
}
