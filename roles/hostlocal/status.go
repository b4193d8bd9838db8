package hostlocal

import (
	"context"
	"errors"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/ipam"
	"github.com/cnibox/cnibox/store"
)

// status reports not ready (code 50) when a range set has no free address
// (every ADD would then fail) or the store cannot be opened.
func status(_ context.Context, a *cniplug.Args, cfg *config) error {
	var ready error
	err := cfg.View(a, func(tx *store.IPAMTx) error {
		ready = ipam.Ready(tx, cfg.Network, cfg.Sets)
		return nil
	})
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil // nothing reserved yet
	case err != nil:
		return cniplug.Errorf(cniplug.CodeNotReady, "network %q: the address store cannot be used: %w", cfg.Network, err)
	}
	return ready
}
