package agentapi

import (
	"bufio"
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
)

func TestReadLine(t *testing.T) {
	long := strings.Repeat("x", 70000) // several bufio buffers
	for _, tt := range []struct{ in, want string }{
		{"{}\n", "{}"},
		{"{}\nrest", "{}"},
		{"{} no newline", "{} no newline"},
		{long + "\n", long},
	} {
		got, err := ReadLine(bufio.NewReader(strings.NewReader(tt.in)))
		if err != nil || string(got) != tt.want {
			t.Errorf("ReadLine(%.20q) = %.20q, %v; want %.20q", tt.in, got, err, tt.want)
		}
	}
	if _, err := ReadLine(bufio.NewReader(strings.NewReader(strings.Repeat("x", MaxMessage+10)))); err == nil {
		t.Errorf("ReadLine of more than MaxMessage bytes succeeded")
	}
	if _, err := ReadLine(bufio.NewReader(strings.NewReader(""))); err == nil {
		t.Errorf("ReadLine of nothing succeeded")
	}
}

// TestClientUnreachable: no agent is an *UnreachableError naming the socket.
func TestClientUnreachable(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "agent.sock")
	_, err := (&Client{Socket: sock}).Pod(context.Background(), "default", "p", "")
	var un *UnreachableError
	if !errors.As(err, &un) || un.Socket != sock || !strings.Contains(err.Error(), sock) {
		t.Errorf("Pod without an agent = %v; want an UnreachableError naming %s", err, sock)
	}
}

func TestErrorIs(t *testing.T) {
	var err error = &Error{Reason: ReasonNotFound, Msg: "pod x: not found"}
	if !errors.Is(err, ErrNotFound) {
		t.Errorf("NotFound error does not match ErrNotFound")
	}
	err = &Error{Reason: ReasonUnavailable, Msg: "down"}
	if errors.Is(err, ErrNotFound) {
		t.Errorf("Unavailable error matches ErrNotFound")
	}
}
