// Package filelock takes the flock(2) locks by which cnibox's processes take
// turns: the store's file (store), its named locks, and the log file's
// rotation (cniplug).
//
// The wait is a blocking flock(2), woken by the kernel as soon as the holder
// closes its file, not a poll (bbolt's own lock polls every 50 ms, and
// under a burst of parallel CNI calls each waiter would lose up to 50 ms per
// round), bounded by a deadline.
package filelock

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"
)

// ErrTimeout: the lock was still held by another process at the deadline.
var ErrTimeout = errors.New("lock held past the deadline")

// Lock takes f's exclusive lock, waiting at most until deadline. On an error
// f is closed, and on ErrTimeout it is closed later, by the goroutine still
// waiting in flock(2) (which cannot be called off), once it gets the lock,
// which drops it again.
func Lock(f *os.File, deadline time.Time) error {
	fd := int(f.Fd())
	err := flock(fd, syscall.LOCK_EX|syscall.LOCK_NB)
	if err == nil {
		return nil
	}
	if !errors.Is(err, syscall.EWOULDBLOCK) {
		f.Close()
		return fmt.Errorf("lock %s: %w", f.Name(), err)
	}
	done := make(chan error, 1)
	go func() { done <- flock(fd, syscall.LOCK_EX) }()
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	select {
	case err := <-done:
		if err != nil {
			f.Close()
			return fmt.Errorf("lock %s: %w", f.Name(), err)
		}
		return nil
	case <-timer.C:
		go func() {
			<-done
			f.Close()
		}()
		return fmt.Errorf("lock %s: %w", f.Name(), ErrTimeout)
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
