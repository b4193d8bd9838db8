package store

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cnibox/cnibox/internal/filelock"
)

// openLocked opens the existing store file and takes its exclusive lock,
// waiting at most until deadline.
//
// bbolt's own lock polls every 50 ms, so under a burst of parallel CNI calls
// each waiter would lose up to 50 ms per round. Here the wait is filelock's
// blocking flock(2), woken by the kernel as soon as the holder closes the
// file; bbolt then locks the same open file again, which succeeds at once.
//
// O_NOFOLLOW: a symlink planted in place of the store fails the open
// (ELOOP) instead of leading root to lock and write the file it names.
func openLocked(path string, deadline time.Time, timeout time.Duration) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	if err := flockUntil(f, path, deadline, timeout); err != nil {
		return nil, err
	}
	return relockIfReplaced(f, path, deadline, timeout)
}

// flockUntil takes f's exclusive lock with filelock.Lock (on an error f is
// closed); past the deadline the error wraps ErrBusy and says what to do.
func flockUntil(f *os.File, path string, deadline time.Time, timeout time.Duration) error {
	err := filelock.Lock(f, deadline)
	if errors.Is(err, filelock.ErrTimeout) {
		return fmt.Errorf("lock %s: %w: another process held it for more than %s; retry, or find the holder with `fuser %s` (the wait is set by %s)",
			path, ErrBusy, timeout, path, EnvTimeout)
	}
	return err
}

// unmapFile removes this process's mappings of the file fi describes (read
// from /proc/self/maps). It is for a bbolt.Open that panicked with the file
// mapped and took its *DB with it.
func unmapFile(fi os.FileInfo) {
	if fi == nil {
		return
	}
	sys, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return
	}
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		return
	}
	// "start-end perms offset major:minor inode path"
	for _, line := range strings.Split(string(maps), "\n") {
		fields := strings.Fields(line)
		if len(fields) < 6 || fields[4] != strconv.FormatUint(sys.Ino, 10) {
			continue
		}
		var maj, min uint64
		if _, err := fmt.Sscanf(fields[3], "%x:%x", &maj, &min); err != nil || unix.Mkdev(uint32(maj), uint32(min)) != sys.Dev {
			continue
		}
		var start, end uintptr
		if _, err := fmt.Sscanf(fields[0], "%x-%x", &start, &end); err != nil || end <= start {
			continue
		}
		_, _, _ = syscall.Syscall(syscall.SYS_MUNMAP, start, end-start, 0)
	}
}
