// Package nsdir prepares the directory that named network namespaces are
// bind-mounted into, the way iproute2 does. It is shared by netops and its
// test helper nstest, which netops' own tests import.
package nsdir

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// Ensure makes dir (/run/netns) a mount point of its own with shared
// propagation, as `ip netns add` and podman do before their first
// namespace. Namespaces bind-mounted into a plain directory are hidden when
// one of those tools later binds the directory over itself: their copies
// above can be unmounted, but the file stays a mount point below and
// removing it fails with EBUSY (the namespace leaks). Making the mount
// first leaves them nothing to do. A lock on the directory keeps two
// processes that start together from stacking two mounts.
func Ensure(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	f, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("open %s: %w", dir, err)
	}
	defer f.Close() // and so unlocks
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		return fmt.Errorf("lock %s: %w", dir, err)
	}
	// Making a mount shared fails with EINVAL when the path is not a mount
	// point: then bind it over itself (recursively, keeping what is
	// mounted there) and try again.
	for bound := false; ; bound = true {
		err := unix.Mount("", dir, "none", unix.MS_SHARED|unix.MS_REC, "")
		if err == nil {
			return nil
		}
		if !errors.Is(err, unix.EINVAL) || bound {
			return fmt.Errorf("make %s a shared mount: %w", dir, err)
		}
		if err := unix.Mount(dir, dir, "none", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("bind %s over itself: %w", dir, err)
		}
	}
}
