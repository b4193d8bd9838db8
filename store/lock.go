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
)

// openLocked opens the existing store file and takes its exclusive lock,
// waiting at most until deadline.
//
// bbolt's own lock polls every 50 ms, so under a burst of parallel CNI calls
// each waiter would lose up to 50 ms per round. Here the wait is a blocking
// flock(2), woken by the kernel as soon as the holder closes the file; bbolt
// then locks the same open file again, which succeeds at once.
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

// flockUntil takes f's exclusive lock, waiting at most until deadline; on
// an error f is closed (or, when the deadline wins, closed by the waiting
// goroutine once it gets the lock, which drops it again).
func flockUntil(f *os.File, path string, deadline time.Time, timeout time.Duration) error {
	fd := int(f.Fd())
	err := flock(fd, syscall.LOCK_EX|syscall.LOCK_NB)
	if err == nil {
		return nil
	}
	if !errors.Is(err, syscall.EWOULDBLOCK) {
		f.Close()
		return fmt.Errorf("lock %s: %w", path, err)
	}
	done := make(chan error, 1)
	go func() { done <- flock(fd, syscall.LOCK_EX) }()
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	select {
	case err := <-done:
		if err != nil {
			f.Close()
			return fmt.Errorf("lock %s: %w", path, err)
		}
		return nil
	case <-timer.C:
		go func() {
			<-done
			f.Close()
		}()
		return fmt.Errorf("lock %s: %w: another process held it for more than %s; retry, or find the holder with `fuser %s` (the wait is set by %s)",
			path, ErrBusy, timeout, path, EnvTimeout)
	}
}

// flock is flock(2), restarted when a signal interrupts it.
func flock(fd, how int) error {
	for {
		err := syscall.Flock(fd, how)
		if !errors.Is(err, syscall.EINTR) {
			return err
		}
	}
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
