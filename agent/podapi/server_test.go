package podapi

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestListen: the socket's directory is created, the socket is private, a
// stale socket is replaced, a live one or a plain file is refused.
func TestListen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "run", "cnibox", "agent.sock")
	ln, err := Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("socket mode %v, %v; want 0600", fi.Mode(), err)
	}
	if _, err := Listen(path); err == nil || !strings.Contains(err.Error(), "another process") {
		t.Errorf("Listen on a live socket = %v; want a refusal", err)
	}
	// A socket left by a killed agent: nobody listens.
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	ln.Close()
	ln, err = Listen(path)
	if err != nil {
		t.Fatalf("Listen over a stale socket: %v", err)
	}
	ln.Close()

	file := filepath.Join(t.TempDir(), "file")
	os.WriteFile(file, []byte("x"), 0o644)
	if _, err := Listen(file); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Errorf("Listen over a file = %v; want a refusal", err)
	}
}
