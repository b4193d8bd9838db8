package agent

import (
	"context"
	"time"

	"github.com/cnibox/cnibox/agent/lease"
)

// applyPending applies the queued lease updates to the kernel. It reports
// false when a kernel change failed (a full resync is due).
func (a *agent) applyPending(ctx context.Context) bool {
	a.mu.Lock()
	updates := a.pending
	a.pending = nil
	a.mu.Unlock()
	start := time.Now()

	ok, full, lost := true, false, false
	for _, u := range updates {
		if u.Snapshot {
			full = true
			a.peers = map[string]lease.Lease{}
			ownSeen := false
			for _, l := range u.Leases {
				if l.Key() == a.own.Key() {
					ownSeen = true
					continue
				}
				if a.isPeer(l) {
					a.peers[l.Key()] = l
				}
			}
			lost = lost || !ownSeen
			continue
		}
		for _, ev := range u.Events {
			key := ev.Lease.Key()
			if key == a.own.Key() {
				if ev.Type == lease.Removed {
					lost = true
				} else if a.cfg.EnableIPv4 && ev.Lease.Attrs.PublicIP != a.under.Public4 {
					a.log.Warn("another node wrote this node's lease", "subnet", key, "publicIP", ev.Lease.Attrs.PublicIP)
				}
				continue
			}
			old, had := a.peers[key]
			switch {
			case ev.Type == lease.Removed:
				delete(a.peers, key)
				if !had {
					old = ev.Lease
				}
				a.log.Info("peer removed", "peer", old.String())
				if !full && !a.removePeer(old) {
					ok = false
				}
			case !a.isPeer(ev.Lease):
				if had {
					delete(a.peers, key)
					if !full && !a.removePeer(old) {
						ok = false
					}
				}
			default:
				a.peers[key] = ev.Lease
				var prev *lease.Lease
				if had {
					prev = &old
				}
				if had && sameAttrs(old, ev.Lease) {
					continue
				}
				a.log.Info("peer added", "peer", ev.Lease.String())
				if !full && !a.addPeer(ev.Lease, prev) {
					ok = false
				}
			}
		}
		a.dirty = true
	}
	if lost {
		a.log.Warn("this node's lease is gone; acquiring it again", "subnet", a.own.Key())
		own, err := a.acquire(ctx, a.own.Subnet, a.own.Subnet6)
		if err != nil {
			a.log.Error("cannot acquire a lease again", "err", err)
			a.ready = false
			a.o.Health.SetReady(false)
			a.m.lease(lease.Lease{}, false)
			a.dirty = true
			return false
		}
		if err := a.takeLease(own); err != nil {
			a.log.Error("cannot take the new lease", "err", err)
			return false
		}
		full = true
	}
	if full {
		return a.fullSync() && ok
	}
	return a.synced(syncUpdates, start, ok)
}

// isPeer reports whether l is another node this agent programs.
func (a *agent) isPeer(l lease.Lease) bool {
	if !a.be.Accepts(l) {
		return false
	}
	if a.cfg.EnableIPv4 && l.Attrs.PublicIP.IsValid() && l.Attrs.PublicIP == a.under.Public4 {
		return false // a stale lease of this very node
	}
	if !a.cfg.EnableIPv4 && a.cfg.EnableIPv6 && l.Attrs.PublicIPv6 == a.under.Public6 {
		return false
	}
	return true
}

func sameAttrs(x, y lease.Lease) bool {
	return x.Attrs.PublicIP == y.Attrs.PublicIP && x.Attrs.PublicIPv6 == y.Attrs.PublicIPv6 &&
		x.Attrs.VTEPMAC.String() == y.Attrs.VTEPMAC.String() && x.Attrs.VTEPMAC6.String() == y.Attrs.VTEPMAC6.String() &&
		x.Attrs.BackendType == y.Attrs.BackendType && lease.SameData(x.Attrs, y.Attrs)
}

// addPeer programs l (replacing prev's entries).
func (a *agent) addPeer(l lease.Lease, prev *lease.Lease) bool {
	if err := a.be.Add(a.h, l, prev); err != nil {
		a.log.Error("cannot program a peer", "peer", l.String(), "err", err)
		return false
	}
	return true
}

// removePeer deletes l's kernel state.
func (a *agent) removePeer(l lease.Lease) bool {
	if err := a.be.Remove(a.h, l); err != nil {
		a.log.Error("cannot remove a peer", "peer", l.String(), "err", err)
		return false
	}
	return true
}

// fullSync makes the backend's devices and everything on them match the
// peers. It reports whether it succeeded.
func (a *agent) fullSync() bool {
	ok, start := true, time.Now()
	if err := a.be.Prepare(a.h); err != nil {
		a.log.Error("cannot ensure the backend's devices", "backend", a.cfg.Backend.Type, "err", err)
		ok = false
	} else if a.own.Subnet.IsValid() || a.own.Subnet6.IsValid() {
		if err := a.be.SetLease(a.h, a.own); err != nil {
			a.log.Error("cannot configure the backend's devices", "backend", a.cfg.Backend.Type, "err", err)
			ok = false
		}
	}
	if ok {
		peers := make([]lease.Lease, 0, len(a.peers))
		for _, l := range a.peers {
			peers = append(peers, l)
		}
		removed, added, err := a.be.Sync(a.h, peers)
		if err != nil {
			a.log.Error("cannot sync the peers", "backend", a.cfg.Backend.Type, "err", err)
			ok = false
		} else if removed+added > 0 {
			a.log.Info("synced the peers", "backend", a.cfg.Backend.Type, "devices", a.be.Devices(), "peers", len(peers), "removed", removed, "added", added)
		}
	}
	return a.synced(syncFull, start, ok)
}

// synced records a kernel sync of kind that started at start and returns
// ok, whether it succeeded.
func (a *agent) synced(kind string, start time.Time, ok bool) bool {
	if ok {
		a.lastSync = time.Now()
		if kind == syncFull && !a.firstSynced && a.o.FirstSynced != nil {
			a.firstSynced = true
			a.o.FirstSynced()
		}
	}
	a.m.synced(kind, start, ok, len(a.peers))
	a.m.unreachable(a.be)
	a.dirty = true
	return ok
}
