package hostlocal

import (
	"context"
	"errors"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/internal/fault"
	"github.com/cnibox/cnibox/ipam"
	"github.com/cnibox/cnibox/store"
)

// del releases every address of the attachment. Nothing to release (or no
// store at all) is success: DEL never fails because something is gone.
func del(_ context.Context, a *cniplug.Args) error {
	cfg, err := loadConfig(a, loadOptions{})
	if err != nil {
		return err
	}
	err = withStore(a, cfg, true, func(s *store.Store) error {
		return s.IPAM(cfg.Network, func(tx *store.IPAMTx) error {
			_, err := ipam.Release(tx, a.ContainerID, a.IfName)
			return err
		})
	})
	fault.Point("hostlocal/del/after-release")
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	return err
}
