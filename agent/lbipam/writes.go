//go:build !nokube

package lbipam

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
)

// writers is how many status writes the leader has in flight at once: one
// write per Service is the floor of an allocation, and one at a time they
// took 1,000 Services created at once 91 s on a loaded machine (make
// bench-lb: ~90 ms each, waiting on the API server, not working).
const writers = 8

// errConflict: the Service changed since the plan read it (its status
// is not what the plan wrote over).
var errConflict = errors.New("the Service changed since it was read")

// writeResults writes what Plan decided, writers at a time: first the
// Services that give an address up, then the others, none of which takes
// an address whose release failed (it waits for the next plan): at no
// version of the Services do two hold an address they may not share. It
// reports whether it stopped because the Lease is not fresh.
func (c *controller) writeResults(ctx context.Context, views map[string]*svcObj, results map[string]Result) (stale bool) {
	var releases, rest []string
	for key, r := range results {
		if slices.ContainsFunc(views[key].Holds, func(a netip.Addr) bool { return !slices.Contains(r.Addrs, a) }) {
			releases = append(releases, key)
		} else {
			rest = append(rest, key)
		}
	}
	slices.Sort(releases)
	slices.Sort(rest)
	held := map[netip.Addr]bool{} // addresses a failed release left held
	if c.writeAll(ctx, releases, views, results, nil, held) {
		return true
	}
	return c.writeAll(ctx, rest, views, results, held, nil)
}

// writeAll writes the Services keys, writers at a time, skipping those
// that would take an address of skip, and adds to failed (if not nil) the
// addresses a failed write leaves held. It reports whether it stopped
// because the Lease is not fresh.
func (c *controller) writeAll(ctx context.Context, keys []string, views map[string]*svcObj, results map[string]Result, skip, failed map[netip.Addr]bool) bool {
	var (
		next  atomic.Int64
		stale atomic.Bool
		mu    sync.Mutex
		wg    sync.WaitGroup
	)
	for range min(writers, len(keys)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stale.Load() {
				i := int(next.Add(1)) - 1
				if i >= len(keys) {
					return
				}
				s, r := views[keys[i]], results[keys[i]]
				if slices.ContainsFunc(r.Addrs, func(a netip.Addr) bool { return skip[a] }) {
					c.wake()
					continue
				}
				err := c.writeService(ctx, s, r)
				switch {
				case errors.Is(err, errNotFresh):
					stale.Store(true)
					return
				case err != nil:
					if !errors.Is(err, errConflict) {
						c.cfg.Log.Warn("LoadBalancer IPAM: cannot write a Service's status", "service", s.Key(), "err", err)
					}
					c.wake()
					if failed != nil {
						mu.Lock()
						for _, a := range s.Holds {
							failed[a] = true
						}
						mu.Unlock()
					}
					continue
				}
				if s.Eligible {
					c.warn(ctx, s, r.Problem)
				}
			}
		}()
	}
	wg.Wait()
	return stale.Load()
}
