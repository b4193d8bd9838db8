package podapi

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/cnibox/cnibox/internal/unixsock/unixsocktest"
)

// TestPeerCredentials: --pod-api-group works: the socket is 0600 root's
// without it and 0660 the group's with it, and a caller gets an answer if
// it runs as root or has the group as its own or a supplementary group
// (SO_PEERGROUPS). With the socket's mode opened up (a changed mode, a
// shared mount), a caller that is neither still gets no answer
// (SO_PEERCRED).
func TestPeerCredentials(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to run a caller as another user")
	}
	for _, tc := range []struct {
		name     string
		gid      int      // --pod-api-group
		groups   []uint32 // the caller's supplementary groups (uid and gid 65534)
		openMode bool     // chmod 0666 after Listen
		mode     os.FileMode
		answer   bool
	}{
		{"root only", NoGroup, nil, false, 0o600, false},
		{"root only, mode opened", NoGroup, nil, true, 0o600, false},
		{"the caller's group", 65534, nil, false, 0o660, true},
		{"a supplementary group", 4242, []uint32{4242}, false, 0o660, true},
		{"another group", 4242, []uint32{4243}, false, 0o660, false},
		{"another group, mode opened", 4242, []uint32{4243}, true, 0o660, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := unixsocktest.Dir(t)
			path := filepath.Join(dir, "agent.sock")
			ln, err := Listen(path, tc.gid)
			if err != nil {
				t.Fatal(err)
			}
			fi, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			wantGid := uint32(0)
			if tc.gid != NoGroup {
				wantGid = uint32(tc.gid)
			}
			if fi.Mode().Perm() != tc.mode || fi.Sys().(*syscall.Stat_t).Gid != wantGid {
				t.Errorf("socket mode %v group %d, want %v group %d", fi.Mode().Perm(), fi.Sys().(*syscall.Stat_t).Gid, tc.mode, wantGid)
			}
			if tc.openMode {
				os.Chmod(path, 0o666)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() {
				done <- Serve(ctx, ln, &recordSource{}, slog.New(slog.NewTextHandler(io.Discard, nil)), Access{GID: tc.gid})
			}()
			defer func() { cancel(); <-done }()
			answer, err := unixsocktest.Call(t, path, 65534, 65534, tc.groups, `{"op":"pod","namespace":"default","name":"mine"}`)
			if got := strings.Contains(answer, `"namespace":"default"`); got != tc.answer {
				t.Errorf("caller uid/gid 65534 groups %v, --pod-api-group %d: answered %v, want %v: %q %v", tc.groups, tc.gid, got, tc.answer, answer, err)
			}
		})
	}
}
