package netops

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// LinkEvent is a change of a link reported by WatchLinks.
type LinkEvent struct {
	Name    string
	Index   int
	Up      bool
	Deleted bool // the link is gone (RTM_DELLINK)
}

// WatchLinks reports link changes in the Handle's namespace on the returned
// channel until ctx ends; the channel is closed then, or when the kernel
// subscription fails (errs, optional, receives why). A long-running caller
// (the overlay agent) uses it to notice its device being deleted.
func (h *Handle) WatchLinks(ctx context.Context, errs func(error)) (<-chan LinkEvent, error) {
	updates := make(chan netlink.LinkUpdate, 64)
	done := make(chan struct{})
	opts := netlink.LinkSubscribeOptions{ErrorCallback: errs, Namespace: h.subscribeNS()}
	if err := netlink.LinkSubscribeWithOptions(updates, done, opts); err != nil {
		return nil, fmt.Errorf("watch links in %s: %w", h.where(), err)
	}
	return relay(ctx, updates, done, 64, func(u netlink.LinkUpdate) (LinkEvent, bool) {
		return LinkEvent{
			Name:    u.Attrs().Name,
			Index:   int(u.Index),
			Up:      u.Flags&unix.IFF_UP != 0,
			Deleted: u.Header.Type == unix.RTM_DELLINK,
		}, true
	}), nil
}

// RouteEvent is a route added or deleted, as WatchRoutes reports it.
type RouteEvent struct {
	Dst       netip.Prefix
	LinkIndex int
	Deleted   bool      // RTM_DELROUTE
	Time      time.Time // when it was received
}

// WatchRoutes reports the IPv4 and IPv6 route changes of the main table in
// the Handle's namespace until ctx ends (benchmarks and the overlay's
// tests use it to see the moment a route appears or goes).
func (h *Handle) WatchRoutes(ctx context.Context, errs func(error)) (<-chan RouteEvent, error) {
	updates := make(chan netlink.RouteUpdate, 1024)
	done := make(chan struct{})
	opts := netlink.RouteSubscribeOptions{ErrorCallback: errs, ReceiveBufferSize: 4 << 20, Namespace: h.subscribeNS()}
	if err := netlink.RouteSubscribeWithOptions(updates, done, opts); err != nil {
		return nil, fmt.Errorf("watch routes in %s: %w", h.where(), err)
	}
	return relay(ctx, updates, done, 1024, func(u netlink.RouteUpdate) (RouteEvent, bool) {
		now := time.Now()
		if u.Table != unix.RT_TABLE_MAIN {
			return RouteEvent{}, false
		}
		p, ok := fromIPNet(u.Dst)
		if !ok {
			return RouteEvent{}, false
		}
		return RouteEvent{Dst: p.Masked(), LinkIndex: u.LinkIndex, Deleted: u.Type == unix.RTM_DELROUTE, Time: now}, true
	}), nil
}

// subscribeNS is the namespace of a netlink subscription: nil for the
// caller's own.
func (h *Handle) subscribeNS() *netns.NsHandle {
	if h.path == "" {
		return nil
	}
	ns := h.ns
	return &ns
}

// relay passes the kernel's updates, converted by conv (false: skip one),
// to the returned channel (of capacity size) until ctx ends or updates is
// closed; then it closes done, which ends the subscription, and the
// channel.
func relay[U, E any](ctx context.Context, updates <-chan U, done chan struct{}, size int, conv func(U) (E, bool)) <-chan E {
	out := make(chan E, size)
	go func() {
		defer close(out)
		defer close(done)
		for {
			select {
			case <-ctx.Done():
				return
			case u, ok := <-updates:
				if !ok {
					return
				}
				ev, ok := conv(u)
				if !ok {
					continue
				}
				select {
				case out <- ev:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	return out
}
