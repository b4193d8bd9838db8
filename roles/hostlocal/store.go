package hostlocal

import (
	"fmt"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/store"
)

// withStore opens the store of cfg for one transaction's time and closes it
// again; a store the calling role shares (store.OpenShared) is used as it is. Store errors keep their codes (busy: 11); others are I/O failures
// (5). noCreate makes a missing store an error wrapping store.ErrNotFound.
func withStore(a *cniplug.Args, cfg *config, noCreate bool, fn func(s *store.Store) error) error {
	dir := store.DirFrom(cfg.DataDir, a.Getenv)
	s, done, err := store.OpenShared(a.Shared, dir, store.Options{Getenv: a.Getenv, NoCreate: noCreate})
	if err != nil {
		return err
	}
	err = fn(s)
	if cerr := done(); err == nil && cerr != nil {
		err = fmt.Errorf("close store %s: %w", s.Path(), cerr)
	}
	return err
}
