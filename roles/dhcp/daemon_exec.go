package dhcp

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
)

// DaemonBinary is the daemon's binary, which `dhcp daemon` execs: the DHCP
// client library lives only there, so that cnibox's every exec does not
// pay for its package inits.
const DaemonBinary = "cnibox-dhcp"

// EnvDaemonBinary names the daemon's binary explicitly.
const EnvDaemonBinary = "CNIBOX_DHCP_DAEMON"

// runDaemon replaces this process with the daemon (same PID, so systemd's
// LISTEN_PID still matches, and the same file descriptors). It looks for
// $CNIBOX_DHCP_DAEMON, then cnibox-dhcp next to this executable, then in
// $PATH.
func runDaemon(args []string) int {
	bin, err := daemonBinary()
	if err != nil {
		fmt.Fprintln(os.Stderr, "dhcp daemon:", err)
		return 1
	}
	err = syscall.Exec(bin, append([]string{bin, "daemon"}, args...), os.Environ())
	fmt.Fprintf(os.Stderr, "dhcp daemon: exec %s: %v\n", bin, err)
	return 1
}

func daemonBinary() (string, error) {
	if b := os.Getenv(EnvDaemonBinary); b != "" {
		return b, nil
	}
	if self, err := os.Executable(); err == nil {
		if real, err := filepath.EvalSymlinks(self); err == nil {
			self = real
		}
		cand := filepath.Join(filepath.Dir(self), DaemonBinary)
		if st, err := os.Stat(cand); err == nil && !st.IsDir() {
			return cand, nil
		}
	}
	if p, err := exec.LookPath(DaemonBinary); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("the daemon's binary %s is neither next to this executable nor in $PATH: install it (make install does) or name it in $%s", DaemonBinary, EnvDaemonBinary)
}
