package netops

import (
	"context"
	"fmt"

	"github.com/vishvananda/netlink"
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
	opts := netlink.LinkSubscribeOptions{ErrorCallback: errs}
	if h.path != "" {
		ns := h.ns
		opts.Namespace = &ns
	}
	if err := netlink.LinkSubscribeWithOptions(updates, done, opts); err != nil {
		return nil, fmt.Errorf("watch links in %s: %w", h.where(), err)
	}
	out := make(chan LinkEvent, 64)
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
				ev := LinkEvent{
					Name:    u.Attrs().Name,
					Index:   int(u.Index),
					Up:      u.Flags&unix.IFF_UP != 0,
					Deleted: u.Header.Type == unix.RTM_DELLINK,
				}
				select {
				case out <- ev:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	return out, nil
}
