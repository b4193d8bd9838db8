// Package nsthread runs code on an OS thread that it moves into another
// network namespace and back, for netops and netops/nstest. setns moves one
// thread, not the process, so the code runs on a locked thread of a
// goroutine of its own, and a thread that cannot return to its namespace is
// never given back to the Go runtime.
package nsthread

import (
	"errors"
	"fmt"
	"runtime"

	"github.com/vishvananda/netns"
)

// Do runs enter and then fn (when enter succeeded and fn is not nil) on a
// locked OS thread of a fresh goroutine, then moves the thread back to the
// namespace it started in. enter moves the thread into a namespace
// (netns.Set, or netns.NewNamed, which creates one). If the thread cannot
// return, the goroutine exits with the thread still locked, so the runtime
// discards it instead of reusing it in the wrong namespace.
func Do(enter, fn func() error) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			done <- fmt.Errorf("open current network namespace: %w", err)
			return
		}
		defer orig.Close()
		err = enter()
		if err == nil && fn != nil {
			err = fn()
		}
		if serr := netns.Set(orig); serr != nil {
			// Leave the thread locked: it dies with this goroutine.
			done <- errors.Join(err, fmt.Errorf("return to the original network namespace: %w", serr))
			return
		}
		runtime.UnlockOSThread()
		done <- err
	}()
	return <-done
}
