package cloudipam

import (
	"context"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/store"
)

// del releases the attachment's addresses; a released address the provider
// no longer lists leaves the cache with it (pruneCache). The provider is not
// asked, so DEL works while it is down; nothing to release is success.
func del(_ context.Context, a *cniplug.Args, c *config) error { return c.Del(a) }

// gc releases every reservation whose attachment is not in the config's
// cni.dev/valid-attachments (or cni.dev/attachments).
func gc(_ context.Context, a *cniplug.Args, c *config) error { return c.GC(a) }

// pruneCache runs in the transaction that released addresses: those that
// the provider no longer lists leave the cache.
func pruneCache(tx *store.IPAMTx, freed []store.Reservation) error {
	if cache, ok := CacheOf(tx); ok && prune(&cache, freed) {
		return PutCache(tx, cache)
	}
	return nil
}
