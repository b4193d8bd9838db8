// Package privnet runs a bench again in a private network namespace of its
// own (the bench's node), and brings that namespace's loopback up. make
// bench, bench-overlay and bench-scale share it.
package privnet

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"

	"github.com/cnibox/cnibox/netops"
)

// Reexec runs this program again with the same arguments and env added to
// the environment, in a new network namespace, passes SIGINT and SIGTERM on
// to it (the child cleans up) and returns its exit code. A failure to
// re-exec is written to stderr after prefix and is exit code 1.
func Reexec(prefix string, env ...string) int {
	cmd := exec.Command("/proc/self/exe", os.Args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET}
	sig := make(chan os.Signal, 4)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	err := cmd.Start()
	if err == nil {
		go func() {
			for s := range sig {
				cmd.Process.Signal(s)
			}
		}()
		err = cmd.Wait()
	}
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		return ee.ExitCode()
	default:
		fmt.Fprintln(os.Stderr, prefix+": re-exec in a private network namespace:", err)
		return 1
	}
}

// LoopbackUp brings lo up in the current network namespace.
func LoopbackUp() error {
	h, err := netops.Open("")
	if err != nil {
		return err
	}
	defer h.Close()
	return h.SetLinkUp("lo")
}
