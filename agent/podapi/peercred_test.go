package podapi

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestHelperDial is not a test: run with PODAPI_DIAL=<socket>, it sends one
// pod request and prints the answer (TestPeerCredentials runs it as nobody).
func TestHelperDial(t *testing.T) {
	path := os.Getenv("PODAPI_DIAL")
	if path == "" {
		t.Skip("helper process only")
	}
	c, err := net.Dial("unix", path)
	if err != nil {
		fmt.Println("dial:", err)
		return
	}
	defer c.Close()
	io.WriteString(c, `{"op":"pod","namespace":"default","name":"mine"}`+"\n")
	line, _ := bufio.NewReader(c).ReadString('\n')
	fmt.Println("answer:", strings.TrimSpace(line))
}

// TestPeerCredentials: with the socket's mode opened up, a caller that is
// neither root nor in --pod-api-group still gets no answer (SO_PEERCRED);
// one in the group, and root, do.
func TestPeerCredentials(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to run a caller as another user")
	}
	for _, tc := range []struct {
		name   string
		gid    int
		answer bool
	}{{"root only", NoGroup, false}, {"nogroup allowed", 65534, true}} {
		t.Run(tc.name, func(t *testing.T) {
			// A directory user nobody can enter (t.TempDir's parent is
			// private), holding the socket and a copy of this test binary.
			dir, err := os.MkdirTemp("", "podapi-peercred")
			if err != nil {
				t.Fatal(err)
			}
			defer os.RemoveAll(dir)
			os.Chmod(dir, 0o755)
			self, err := os.ReadFile(os.Args[0])
			if err != nil {
				t.Fatal(err)
			}
			bin := filepath.Join(dir, "podapi.test")
			if err := os.WriteFile(bin, self, 0o755); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(dir, "agent.sock")
			ln, err := Listen(path)
			if err != nil {
				t.Fatal(err)
			}
			os.Chmod(path, 0o666)
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() {
				done <- Serve(ctx, ln, &recordSource{}, slog.New(slog.NewTextHandler(io.Discard, nil)), Access{GID: tc.gid})
			}()
			defer func() { cancel(); <-done }()
			cmd := exec.Command(bin, "-test.run=^TestHelperDial$")
			cmd.Env = append(os.Environ(), "PODAPI_DIAL="+path)
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("caller: %v\n%s", err, out)
			}
			got := strings.Contains(string(out), `"namespace":"default"`)
			if got != tc.answer {
				t.Errorf("caller uid/gid 65534, allowed gid %d: answered %v, want %v\n%s", tc.gid, got, tc.answer, out)
			}
		})
	}
}
