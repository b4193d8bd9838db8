//go:build faultpoints

package fault

import (
	"os"
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
		_ = syscall.Kill(os.Getpid(), syscall.SIGSTOP)
		return
	}
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {} // SIGKILL is not delivered synchronously; never return
}
