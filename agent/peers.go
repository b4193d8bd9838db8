package agent

import (
	"context"
	"net/netip"
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
				} else if ev.Lease.Attrs.PublicIP != a.under.Public4 && a.v4 != nil {
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
	if ok {
		a.lastSync = time.Now()
	}
	a.m.synced(syncUpdates, start, ok, len(a.peers))
	a.dirty = true
	return ok
}

// isPeer reports whether l is another node this agent programs.
func (a *agent) isPeer(l lease.Lease) bool {
	if l.Attrs.BackendType != "" && l.Attrs.BackendType != lease.BackendVXLAN {
		return false
	}
	if a.v4 != nil && l.Attrs.PublicIP.IsValid() && l.Attrs.PublicIP == a.under.Public4 {
		return false // a stale lease of this very node
	}
	if a.v4 == nil && a.v6 != nil && l.Attrs.PublicIPv6 == a.under.Public6 {
		return false
	}
	return true
}

func sameAttrs(x, y lease.Lease) bool {
	return x.Attrs.PublicIP == y.Attrs.PublicIP && x.Attrs.PublicIPv6 == y.Attrs.PublicIPv6 &&
		x.Attrs.VTEPMAC.String() == y.Attrs.VTEPMAC.String() && x.Attrs.VTEPMAC6.String() == y.Attrs.VTEPMAC6.String() &&
		x.Attrs.BackendType == y.Attrs.BackendType
}

// addPeer programs l in every family (replacing prev's entries).
func (a *agent) addPeer(l lease.Lease, prev *lease.Lease) bool {
	ok := true
	for _, ov := range a.overlays() {
		t, has := ov.target(l)
		var old *target
		if prev != nil {
			if ot, ok := ov.target(*prev); ok {
				old = &ot
			}
		}
		var err error
		switch {
		case !has && old != nil:
			err = ov.remove(a.h, *old)
		case has:
			err = ov.add(a.h, t, old)
		}
		if err != nil {
			a.log.Error("cannot program a peer", "peer", l.String(), "err", err)
			ok = false
		}
	}
	return ok
}

// removePeer deletes l's entries in every family.
func (a *agent) removePeer(l lease.Lease) bool {
	ok := true
	for _, ov := range a.overlays() {
		if t, has := ov.target(l); has {
			if err := ov.remove(a.h, t); err != nil {
				a.log.Error("cannot remove a peer", "peer", l.String(), "err", err)
				ok = false
			}
		}
	}
	return ok
}

// fullSync makes the device and everything on it match the peers. It
// reports whether it succeeded.
func (a *agent) fullSync() bool {
	ok, start := true, time.Now()
	for _, ov := range a.overlays() {
		created, err := ov.ensureDevice(a.h)
		if err != nil {
			a.log.Error("cannot ensure the vxlan device", "device", ov.opts.Name, "err", err)
			ok = false
			continue
		}
		if created {
			a.log.Warn("the vxlan device was missing; re-created it", "device", ov.opts.Name, "mac", ov.opts.MAC.String())
		}
		targets := map[netip.Prefix]target{}
		for _, l := range a.peers {
			if t, has := ov.target(l); has {
				targets[t.subnet] = t
			}
		}
		removed, added, err := ov.sync(a.h, targets)
		if err != nil {
			a.log.Error("cannot sync the peers", "device", ov.opts.Name, "err", err)
			ok = false
			continue
		}
		if removed+added > 0 {
			a.log.Info("synced the peers", "device", ov.opts.Name, "peers", len(targets), "removed", removed, "added", added)
		}
	}
	if ok {
		a.lastSync = time.Now()
	}
	a.m.synced(syncFull, start, ok, len(a.peers))
	a.dirty = true
	return ok
}
