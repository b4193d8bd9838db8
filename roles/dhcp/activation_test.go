package dhcp_test

import (
	"bytes"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/cnibox/cnibox/netops/nstest"
	"github.com/cnibox/cnibox/roles/dhcp"
	"github.com/cnibox/cnibox/roles/internal/roletest"
)

// TestSocketActivation: started the way systemd starts it (the listening
// socket as fd 3, LISTEN_FDS=1, LISTEN_PID its own PID), the daemon serves
// on that socket and ignores -socketpath.
func TestSocketActivation(t *testing.T) {
	nstest.RequireRoot(t)
	sh := nstest.RequireProgram(t, "sh", "dash")
	dir := t.TempDir()
	sock := filepath.Join(dir, "activated.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	f, err := ln.(*net.UnixListener).File()
	if err != nil {
		t.Fatal(err)
	}
	ln.Close()                  // the daemon's copy (fd 3) keeps listening
	bin, err := os.Executable() // os.Args[0] may be /proc/self/exe, which would be sh's
	if err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(), daemonEnv+"=1")
	if b := os.Getenv("CNIBOX_BIN"); b != "" {
		bin = filepath.Join(dir, "dhcp")
		if err := os.Symlink(b, bin); err != nil {
			t.Fatal(err)
		}
	}
	// sh sets LISTEN_PID to its own PID, which exec keeps, as systemd does.
	cmd := exec.Command(sh, "-c", `LISTEN_PID=$$ LISTEN_FDS=1 exec "$0" "$@"`, bin, "daemon",
		"-socketpath", filepath.Join(dir, "unused.sock"), "-datadir", filepath.Join(dir, "data"))
	cmd.Env = env
	cmd.ExtraFiles = []*os.File{f}
	var log bytes.Buffer
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGKILL)
		cmd.Wait()
		if t.Failed() {
			t.Logf("daemon log:\n%s", log.String())
		}
	})
	n := roletest.NewNode(t, dhcp.Role)
	c := []byte(`{"cniVersion":"1.1.0","name":"x","type":"dhcp","ipam":{"type":"dhcp","daemonSocketPath":"` + sock + `"}}`)
	if _, err := n.Call(dhcp.Role, "STATUS", roletest.Pod{}, c); err != nil {
		t.Fatalf("STATUS on the activated socket: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "unused.sock")); err == nil {
		t.Errorf("the daemon created -socketpath although systemd passed a socket")
	}
}
