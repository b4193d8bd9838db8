package cloudipam

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/ipam"
	"github.com/cnibox/cnibox/store"
)

// del releases the attachment's addresses; a released address the provider
// no longer lists leaves the cache with it. The provider is not asked, so
// DEL works while it is down; nothing to release is success.
func del(_ context.Context, a *cniplug.Args, provider string) error {
	c, err := loadConfig(a, provider)
	if err != nil {
		return err
	}
	return release(a, c, func(tx *store.IPAMTx) ([]store.Reservation, error) {
		return ipam.Release(tx, a.ContainerID, a.IfName)
	})
}

// gc releases every reservation whose attachment is not in the config's
// cni.dev/valid-attachments (or cni.dev/attachments).
func gc(_ context.Context, a *cniplug.Args, provider string) error {
	c, err := loadConfig(a, provider)
	if err != nil {
		return err
	}
	var keys map[string]json.RawMessage
	_ = json.Unmarshal(a.StdinData, &keys)
	if _, ok := keys["cni.dev/valid-attachments"]; !ok {
		if _, ok := keys["cni.dev/attachments"]; !ok {
			return cniplug.ConfError("cni.dev/valid-attachments", "missing: GC releases every address not in this list; pass the attachments to keep ([] to release all)")
		}
	}
	var freed []store.Reservation
	err = release(a, c, func(tx *store.IPAMTx) (rs []store.Reservation, err error) {
		freed, err = ipam.GC(tx, a.Conf.Keeps)
		return freed, err
	})
	if err == nil && a.Stderr != nil {
		for _, r := range freed {
			fmt.Fprintf(a.Stderr, "cnibox %s GC: network %q: released %s of container %s interface %s\n", a.Conf.IPAM.Type, c.Network, r.Addr, r.ContainerID, r.IfName)
		}
	}
	return err
}

// release runs free in one transaction and prunes the cache of what it freed.
func release(a *cniplug.Args, c *config, free func(tx *store.IPAMTx) ([]store.Reservation, error)) error {
	err := withStore(a, c, true, func(s *store.Store) error {
		return s.IPAM(c.Network, func(tx *store.IPAMTx) error {
			freed, err := free(tx)
			if err != nil {
				return err
			}
			if cache, ok := tx.CloudCache(); ok && prune(&cache, freed) {
				return tx.PutCloudCache(cache)
			}
			return nil
		})
	})
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	return err
}
