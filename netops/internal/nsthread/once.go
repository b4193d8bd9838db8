package nsthread

import "runtime"

// Once runs fn on a locked OS thread of a fresh goroutine that is never
// given back: the goroutine ends with the thread still locked, so the
// runtime ends the thread too. It is for code that changes what a thread is
// beyond its network namespace (its security label, for a device the kernel
// labels after the creating thread), which Do's return to the original
// namespace would not undo.
func Once(fn func() error) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked
		done <- fn()
	}()
	return <-done
}
