package etcdlease

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/cnibox/cnibox/agent/lease"
)

// Watch sends a snapshot of every lease, then the changes, until ctx ends.
// After a compaction or a broken watch it sends a fresh snapshot. The waits
// before listing again are jittered: an outage breaks every agent's watch
// at once, and 5,000 agents on one backoff schedule would relist in
// lockstep when etcd comes back.
func (m *Manager) Watch(ctx context.Context, fn func(lease.Update)) error {
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		entries, rev, err := m.list(ctx)
		if err != nil {
			wait := jitter(backoff)
			m.log.Warn("cannot list the leases; retrying", "err", err, "in", wait)
			if !sleep(ctx, wait) {
				break
			}
			backoff = min(2*backoff, 5*time.Second)
			continue
		}
		backoff = 100 * time.Millisecond
		snap := lease.Update{Snapshot: true, Leases: make([]lease.Lease, len(entries))}
		for i, e := range entries {
			snap.Leases[i] = e.lease
		}
		fn(snap)
		if err := m.watchFrom(ctx, rev+1, fn); err != nil && ctx.Err() == nil {
			m.log.Warn("the lease watch broke; listing again", "err", err)
			sleep(ctx, jitter(backoff))
		}
	}
	return ctx.Err()
}

// watchFrom delivers the events after rev until the watch fails.
func (m *Manager) watchFrom(ctx context.Context, rev int64, fn func(lease.Update)) error {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	// No WithPrevKV: etcd would read the previous value from its backend
	// for every watcher of every deletion; the agent knows its peers.
	for resp := range m.cli.Watch(wctx, m.subnetsKey(), clientv3.WithPrefix(), clientv3.WithRev(rev)) {
		if err := resp.Err(); err != nil {
			return err
		}
		var u lease.Update
		for _, ev := range resp.Events {
			switch ev.Type {
			case clientv3.EventTypeDelete:
				sn4, sn6, ok := lease.ParseSubnetKey(string(ev.Kv.Key))
				if !ok {
					continue
				}
				u.Events = append(u.Events, lease.Event{Type: lease.Removed, Lease: lease.Lease{Subnet: sn4, Subnet6: sn6}})
			default:
				l, err := m.parseKV(ev.Kv)
				if err != nil {
					m.log.Warn("ignoring a lease that cannot be read", "key", string(ev.Kv.Key), "err", err)
					continue
				}
				u.Events = append(u.Events, lease.Event{Type: lease.Added, Lease: l})
			}
		}
		if len(u.Events) > 0 {
			fn(u)
		}
	}
	if ctx.Err() != nil {
		return nil
	}
	return fmt.Errorf("etcd: the watch of %s ended", m.subnetsKey())
}

// jitter is d spread uniformly over [d/2, 3d/2): the mean stays d, and
// agents that failed together retry over a window as wide as the backoff.
func jitter(d time.Duration) time.Duration {
	if d <= 1 {
		return d
	}
	return d/2 + rand.N(d)
}

// sleep waits d or until ctx ends; it reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}
