package netops

import (
	"fmt"

	"github.com/vishvananda/netns"

	"github.com/cnibox/cnibox/netops/internal/nsthread"
)

// InNetns runs fn on a locked OS thread inside the network namespace at
// nsPath ("" = the caller's own, fn runs in the calling goroutine). Sockets
// fn opens stay in that namespace and may be used from any goroutine
// afterwards, and they keep the namespace (and its interfaces) alive until
// they are closed, even after the namespace's file is unmounted. A missing
// namespace wraps ErrNotFound.
func InNetns(nsPath string, fn func() error) error {
	if nsPath == "" {
		return fn()
	}
	ns, err := netns.GetFromPath(nsPath)
	if err != nil {
		if ok, _ := NetnsExists(nsPath); !ok {
			return fmt.Errorf("open network namespace %q: %w", nsPath, ErrNotFound)
		}
		return fmt.Errorf("open network namespace %q: %w", nsPath, err)
	}
	defer ns.Close()
	return nsthread.Do(func() error {
		if err := netns.Set(ns); err != nil {
			return fmt.Errorf("enter network namespace %q: %w", nsPath, err)
		}
		return nil
	}, fn)
}
