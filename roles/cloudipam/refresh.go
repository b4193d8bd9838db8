package cloudipam

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/store"
)

// poolFunc works on the pools of one network inside its IPAM transaction.
type poolFunc func(tx *store.IPAMTx, cache *CloudCache) error

// serves reports whether cache can be used without asking the provider: it
// comes from the configured provider and endpoint, which was asked less than
// queryInterval ago (answered, or not answered while an earlier answer is
// kept).
func (c *config) serves(cache CloudCache, now time.Time) bool {
	return cache.Provider == c.Provider && cache.Source == c.Endpoint &&
		!cache.Fetched.IsZero() && !cache.Attempted.After(now) &&
		now.Sub(cache.Attempted) < c.QueryInterval
}

// withPools runs fn in one IPAM transaction of the network with pools that
// are fresh enough. The fast path is one transaction on the cache. When the
// cache is older than queryInterval, the store is closed, the provider
// asked (with its timeouts), and its answer merged into the cache in the
// transaction that runs fn. A provider that cannot be reached leaves the
// cached pools in use, however old; with none cached the error has code 11
// (try again later). A malformed answer is code 6.
func withPools(ctx context.Context, a *cniplug.Args, c *config, fn poolFunc) error {
	start := time.Now()
	served := false
	err := c.Update(a, func(tx *store.IPAMTx) error {
		cache, ok := CacheOf(tx)
		if !ok || !c.serves(cache, start) {
			return nil // nothing written: no commit
		}
		served = true
		return fn(tx, &cache)
	})
	if served || err != nil {
		return err
	}

	prov := newProvider(c)
	local, err := localNICs()
	if err != nil {
		return cniplug.Errorf(types.ErrIOFailure, "list the node's interfaces to match them with %s: %w", prov.describe(), err)
	}
	want := func(mac string) bool {
		for _, l := range local {
			if l.MAC == mac && (c.Master == "" || l.Name == c.Master) {
				return true
			}
		}
		return false
	}
	listed, qerr := prov.query(ctx, want)
	var matched []CloudNIC
	switch {
	case qerr == nil:
		if matched, err = match(c, prov.describe(), listed, local); err != nil {
			return err
		}
	case !isUnreachable(qerr):
		return qerr
	}

	return c.Update(a, func(tx *store.IPAMTx) error {
		old, ok := CacheOf(tx)
		now := time.Now()
		if qerr != nil {
			if ok && old.Provider == c.Provider && !old.Fetched.IsZero() && !old.Fetched.Before(start) {
				return fn(tx, &old) // another call got an answer meanwhile
			}
			if !ok || old.Provider != c.Provider || old.Fetched.IsZero() {
				return cniplug.Errorf(types.ErrTryAgainLater, "network %q: %v; there is no earlier answer to hand out addresses from: make sure the node reaches it (or set %s / \"endpoint\"), then try again", c.Network, qerr, EnvEndpoint)
			}
			old.Attempted, old.LastError = now, qerr.Error()
			if err := PutCache(tx, old); err != nil {
				return err
			}
			if a.Stderr != nil {
				fmt.Fprintf(a.Stderr, "cnibox %s: network %q: %v; using its answer of %s\n", a.Conf.IPAM.Type, c.Network, qerr, old.Fetched.Format(time.RFC3339))
			}
			return fn(tx, &old)
		}
		var prev []CloudNIC
		if ok {
			prev = old.NICs
		}
		inUse := func(addr netip.Addr) bool { _, held := tx.Get(addr); return held }
		cache := CloudCache{
			Provider: c.Provider, Source: c.Endpoint, Fetched: now, Attempted: now,
			NICs: merge(prev, matched, inUse),
		}
		if err := PutCache(tx, cache); err != nil {
			return err
		}
		return fn(tx, &cache)
	})
}
