package nsthread

import (
	"fmt"
	"runtime"
)

// Once runs enter and then fn (when enter succeeded) on a locked OS thread
// of a fresh goroutine that is never given back: the goroutine exits with
// the thread still locked, so the runtime ends the thread. It is for code
// that changes what a thread is beyond its network namespace (its security
// label, for a device the kernel labels after the creating thread), where
// Do's return to the original namespace would not be enough.
func Once(enter, fn func() error) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer func() {
			if r := recover(); r != nil {
				done <- fmt.Errorf("panic on a throwaway thread: %v", r)
			}
		}()
		err := enter()
		if err == nil && fn != nil {
			err = fn()
		}
		done <- err
	}()
	return <-done
}
