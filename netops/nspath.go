package netops

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// NetnsExists reports whether path is a live network namespace: an nsfs
// file of type network, such as /run/netns/NAME (still mounted) or
// /proc/PID/ns/net. A missing path, a process that is gone, or a plain file
// left behind where a namespace was mounted all report false with a nil
// error; other failures (permissions) return the error.
func NetnsExists(path string) (bool, error) {
	if path == "" {
		return false, fmt.Errorf("network namespace: empty path")
	}
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ESRCH) || errors.Is(err, unix.ENOTDIR) {
			return false, nil
		}
		return false, fmt.Errorf("network namespace %q: %w", path, err)
	}
	if st.Type != unix.NSFS_MAGIC {
		return false, nil
	}
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ESRCH) {
			return false, nil
		}
		return false, fmt.Errorf("network namespace %q: %w", path, err)
	}
	defer unix.Close(fd)
	typ, err := unix.IoctlRetInt(fd, unix.NS_GET_NSTYPE)
	if err != nil {
		return false, fmt.Errorf("network namespace %q: %w", path, err)
	}
	return typ == unix.CLONE_NEWNET, nil
}
