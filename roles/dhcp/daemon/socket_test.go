package daemon

import (
	"bufio"
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cnibox/cnibox/internal/unixsock/unixsocktest"

	"github.com/cnibox/cnibox/roles/dhcp/proto"
)

// TestSocket: the daemon's socket is 0600 whatever the process umask; a
// caller that is not root gets no answer even with the mode opened up
// (SO_PEERCRED); a request line longer than proto.MaxMessage is refused at
// once, not read without end.
func TestSocket(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to run a caller as another user")
	}
	dir := unixsocktest.Dir(t)
	sock := filepath.Join(dir, "dhcp.sock")
	old := syscall.Umask(0)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, Options{Socket: sock, DataDir: filepath.Join(dir, "data")}) }()
	defer func() { cancel(); <-done }()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if c, err := net.Dial("unix", sock); err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the daemon does not listen")
		}
	}
	syscall.Umask(old)
	if fi, err := os.Stat(sock); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("socket %v %v, want mode 0600 (the process umask was 0)", fi.Mode(), err)
	}

	// root is answered
	resp, err := proto.Call(ctx, sock, &proto.Request{Op: proto.OpStatus})
	if err != nil || resp.Error != "" {
		t.Fatalf("status as root: %+v %v", resp, err)
	}
	// nobody is not, with the mode opened or not
	for _, mode := range []os.FileMode{0o600, 0o666} {
		os.Chmod(sock, mode)
		if answer, err := unixsocktest.Call(t, sock, 65534, 65534, nil, `{"op":"status"}`); answer != "" {
			t.Errorf("uid 65534, socket mode %v: answered %q %v", mode, answer, err)
		}
	}

	// a line without end: refused once it passes the bound
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second)) // the daemon's own is 30 s
	go func() {
		chunk := []byte(strings.Repeat("x", 4096))
		for i := 0; i < 4*proto.MaxMessage/len(chunk); i++ {
			if _, err := c.Write(chunk); err != nil {
				return
			}
		}
	}()
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil || !strings.Contains(line, "longer than") {
		t.Errorf("a request of more than %d bytes: %q %v, want an error that says it is too long", proto.MaxMessage, line, err)
	}
}
