//go:build faultpoints

package fault

import (
	"os"
	"runtime"
	"strings"
	"syscall"
)

// Enabled reports whether this build has fault points (the faultpoints tag).
const Enabled = true

// Point kills the process with SIGKILL when $CNIBOX_FAULT is name, or stops
// it with SIGSTOP when $CNIBOX_FAULT is name + ":stop".
func Point(name string) {
	want, mode, _ := strings.Cut(os.Getenv(Env), ":")
	if want != name {
		return
	}
	if mode == "stop" {
		stop()
		return
	}
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {} // SIGKILL is not delivered synchronously; never return
}

// stop stops the process with a SIGSTOP sent to the calling thread. A
// SIGSTOP sent to the process (kill) may be taken by another thread, and the
// caller can run on until that thread's group stop reaches it: once in CI,
// an ADD ran to its end and exited before it stopped. A thread-directed one
// is taken by this thread on its way out of the tgkill call, so nothing runs
// past the fault point before the stop.
func stop() {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	_ = syscall.Tgkill(os.Getpid(), syscall.Gettid(), syscall.SIGSTOP)
}
