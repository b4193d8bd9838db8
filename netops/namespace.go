package netops

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/cnibox/cnibox/netops/internal/nsdir"
	"github.com/cnibox/cnibox/netops/internal/nsthread"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// NamedNSDir is where named network namespaces are bind-mounted, as by
// `ip netns add`.
const NamedNSDir = "/run/netns"

// CreateNamedNS creates a network namespace bind-mounted at
// /run/netns/<name> (like `ip netns add`; its loopback stays down) and
// returns its path. The error wraps ErrExists when the name is taken.
func CreateNamedNS(name string) (string, error) {
	if err := checkNSName(name); err != nil {
		return "", err
	}
	if err := EnsureNamedNSDir(); err != nil {
		return "", err
	}
	path := filepath.Join(NamedNSDir, name)
	// netns.NewNamed moves the calling thread into the new namespace.
	err := nsthread.Do(func() error {
		ns, err := netns.NewNamed(name)
		if err == nil {
			ns.Close()
		}
		return err
	}, nil)
	if err != nil {
		if errors.Is(err, fs.ErrExist) {
			return "", fmt.Errorf("create network namespace %q: %w (%w)", path, ErrExists, err)
		}
		// The mount point may have been made before the mount failed.
		_ = os.Remove(path)
		return "", fmt.Errorf("create network namespace %q: %w", path, err)
	}
	return path, nil
}

// EnsureNamedNSDir makes NamedNSDir a shared mount point of its own, as
// `ip netns add` does before its first namespace (see nsdir.Ensure).
func EnsureNamedNSDir() error { return nsdir.Ensure(NamedNSDir) }

// DeleteNamedNS removes the namespace /run/netns/<name> (like `ip netns
// delete`); the namespace itself goes away when nothing else uses it. A
// missing name is not an error.
func DeleteNamedNS(name string) error {
	if err := checkNSName(name); err != nil {
		return err
	}
	path := filepath.Join(NamedNSDir, name)
	// EINVAL: not a mount point (any more); the file may still be there.
	if err := unix.Unmount(path, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("delete network namespace %q: %w", path, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("delete network namespace %q: %w", path, err)
	}
	return nil
}

// checkNSName reports a usable error when name cannot name a namespace.
func checkNSName(name string) error {
	if name == "" || name == "." || name == ".." || strings.ContainsAny(name, "/\x00") {
		return fmt.Errorf("invalid network namespace name %q", name)
	}
	return nil
}
