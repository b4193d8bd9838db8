package store

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// Lock takes the node-wide exclusive lock called name: a file name.lock in
// the store's directory dir, locked with flock(2) and waited for at most the
// store's timeout (CNIBOX_STORE_TIMEOUT). It is for kernel state outside the
// store that cnibox's processes must not change while another one reads it,
// such as the firewall's rules (a netlink dump that a concurrent change
// interrupts can skip rules). The lock is dropped by unlock, or when the
// process exits.
func Lock(dir, name string) (unlock func(), err error) {
	timeout, err := Options{}.timeout()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("lock %s: %w", name, err)
	}
	path := filepath.Join(dir, name+".lock")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", name, err)
	}
	if err := flockUntil(f, path, time.Now().Add(timeout), timeout); err != nil {
		return nil, err
	}
	return func() { f.Close() }, nil
}
