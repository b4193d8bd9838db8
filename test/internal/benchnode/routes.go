package benchnode

import (
	"context"
	"net/netip"
	"sync"
	"time"

	"github.com/cnibox/cnibox/netops"
)

// PeerRoutes follows the routes to peers' subnets (prefixes inside a
// cluster network, longer than it) in one namespace, as the kernel reports
// them: how many there are, when the wanted number was first reached, and
// when each one went.
type PeerRoutes struct {
	mu       sync.Mutex
	want     int
	routes   map[netip.Prefix]bool
	complete time.Time
	deleted  map[netip.Prefix]time.Time
}

// WatchPeerRoutes starts following the peer routes within cluster in h's
// namespace until ctx ends; want is the count that makes it complete (0:
// none yet, SetWant later).
func WatchPeerRoutes(ctx context.Context, h *netops.Handle, cluster netip.Prefix, want int) (*PeerRoutes, error) {
	events, err := h.WatchRoutes(ctx, nil)
	if err != nil {
		return nil, err
	}
	p := &PeerRoutes{want: want, routes: map[netip.Prefix]bool{}, deleted: map[netip.Prefix]time.Time{}}
	go func() {
		for ev := range events {
			if !cluster.Contains(ev.Dst.Addr()) || ev.Dst.Bits() <= cluster.Bits() {
				continue
			}
			p.mu.Lock()
			if ev.Deleted {
				delete(p.routes, ev.Dst)
				p.deleted[ev.Dst] = ev.Time
			} else {
				p.routes[ev.Dst] = true
				if p.want > 0 && len(p.routes) >= p.want && p.complete.IsZero() {
					p.complete = ev.Time
				}
			}
			p.mu.Unlock()
		}
	}()
	return p, nil
}

// SetWant sets the count that makes the routes complete.
func (p *PeerRoutes) SetWant(n int) {
	p.mu.Lock()
	p.want = n
	p.mu.Unlock()
}

// Want is the count that makes the routes complete.
func (p *PeerRoutes) Want() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.want
}

// Complete is when the wanted count was first reached (zero: not yet), and
// how many peer routes there are now.
func (p *PeerRoutes) Complete() (time.Time, int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.complete, len(p.routes)
}

// Deleted is when the route to sn was last deleted, if it was.
func (p *PeerRoutes) Deleted(sn netip.Prefix) (time.Time, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	t, ok := p.deleted[sn]
	return t, ok
}
