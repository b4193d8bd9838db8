// Package fwdtest runs Debian's firewalld for a test, on a private D-Bus
// and inside its own network and mount namespaces: its nftables rules, and
// whatever it writes under /run, /var/log and /etc/firewalld, stay in
// namespaces that end with the test. The machine's own rules are never
// touched.
package fwdtest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/cnibox/cnibox/internal/testenv"
)

// busConf is a system-bus-like policy for root only, on a socket of the
// test's own.
const busConf = `<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-BUS Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>system</type>
  <listen>unix:path=%s</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <deny user="*"/>
    <allow user="root"/>
    <allow own="*"/>
    <allow send_destination="*"/>
    <allow receive_sender="*"/>
  </policy>
</busconfig>
`

// script runs inside the new namespaces: it hides the machine's /run and
// /var/log and /etc/firewalld behind the test's own, starts the bus and
// then firewalld in the foreground.
const script = `set -e
mount --make-rprivate /
mount -t tmpfs tmpfs /run
mount -t tmpfs tmpfs /var/log
cp -a /etc/firewalld/. "$DIR/etc/"
mount --bind "$DIR/etc" /etc/firewalld
dbus-daemon --config-file="$DIR/bus.conf" --nofork --nopidfile &
i=0
while [ ! -S "$DIR/bus" ]; do i=$((i+1)); [ $i -lt 600 ] || exit 1; sleep 0.1; done
exec firewalld --nofork --nopid --log-target console
`

// Start runs firewalld for the test and returns the bus address to give
// the code under test as DBUS_SYSTEM_BUS_ADDRESS, with firewalld ready.
// It skips the test when firewalld, dbus-daemon or unshare is missing, or
// when not root. Cleanup stops both.
func Start(t *testing.T) string {
	t.Helper()
	if !testenv.Root() {
		t.Skip("firewalld needs root")
	}
	for _, p := range []string{"firewalld", "dbus-daemon", "unshare"} {
		if _, err := exec.LookPath(p); err != nil {
			t.Skipf("%s is not installed (apt-get install firewalld): %v", p, err)
		}
	}
	// A short path: a unix socket's path has at most 107 bytes.
	dir, err := os.MkdirTemp("", "fwd")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "bus")
	if err := os.WriteFile(filepath.Join(dir, "bus.conf"), []byte(fmt.Sprintf(busConf, sock)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(filepath.Join(dir, "firewalld.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	cmd := exec.Command("unshare", "--net", "--mount", "--", "sh", "-c", script)
	cmd.Env = append(os.Environ(), "DIR="+dir, "DBUS_SYSTEM_BUS_ADDRESS=unix:path="+sock)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start firewalld: %v", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		// The process group: firewalld and the bus.
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-exited
		}
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	})
	addr := "unix:path=" + sock
	deadline := time.Now().Add(90 * time.Second)
	for {
		if ready(addr) {
			return addr
		}
		select {
		case <-exited:
			t.Fatalf("firewalld exited before it was ready:\n%s", tail(dir))
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("firewalld not ready after 90 s:\n%s", tail(dir))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// ready reports whether firewalld answers on the bus with its state
// RUNNING (it owns its name before it has loaded its zones).
func ready(addr string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := dbus.Connect(addr, dbus.WithContext(ctx))
	if err != nil {
		return false
	}
	defer conn.Close()
	v, err := conn.Object("org.fedoraproject.FirewallD1", "/org/fedoraproject/FirewallD1").
		GetProperty("org.fedoraproject.FirewallD1.state")
	if err != nil {
		return false
	}
	s, _ := v.Value().(string)
	return s == "RUNNING"
}

// tail returns the end of firewalld's log.
func tail(dir string) string {
	b, _ := os.ReadFile(filepath.Join(dir, "firewalld.log"))
	s := string(b)
	if len(s) > 4000 {
		s = s[len(s)-4000:]
	}
	return strings.TrimSpace(s)
}
