package podapi

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cnibox/cnibox/internal/agentapi"
)

// TestListen: the socket's directory is created, the socket is private, a
// stale socket is replaced, a live one or a plain file is refused.
func TestListen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "run", "cnibox", "agent.sock")
	ln, err := Listen(path, NoGroup)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("socket mode %v, %v; want 0600", fi.Mode(), err)
	}
	if _, err := Listen(path, NoGroup); err == nil || !strings.Contains(err.Error(), "another process") {
		t.Errorf("Listen on a live socket = %v; want a refusal", err)
	}
	// A socket left by a killed agent: nobody listens.
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	ln.Close()
	ln, err = Listen(path, NoGroup)
	if err != nil {
		t.Fatalf("Listen over a stale socket: %v", err)
	}
	ln.Close()

	file := filepath.Join(t.TempDir(), "file")
	os.WriteFile(file, []byte("x"), 0o644)
	if _, err := Listen(file, NoGroup); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Errorf("Listen over a file = %v; want a refusal", err)
	}
}

// TestIPAMNotServed: an agent started without --cluster-ipam answers the
// cluster IPAM's calls with ReasonNotServed and a message naming the flag,
// so that doctor and inspect tell it from an agent that cannot reach the
// API, and the whereabouts role says what to start.
func TestIPAMNotServed(t *testing.T) {
	c := serveTest(t, nil, Access{GID: NoGroup})
	_, err := c.IPAM(context.Background(), agentapi.OpIPAMPools, &agentapi.IPAMRequest{})
	var ae *agentapi.Error
	if !errors.As(err, &ae) || ae.Reason != agentapi.ReasonNotServed || !strings.Contains(ae.Msg, "--cluster-ipam") {
		t.Errorf("ipam-pools of an agent without the cluster IPAM: %v; want reason %s naming --cluster-ipam", err, agentapi.ReasonNotServed)
	}
}

// serveTest runs Serve with src and acc on a socket of its own until the
// test ends and returns a client of it.
func serveTest(t *testing.T, src Source, acc Access) *agentapi.Client {
	t.Helper()
	path := filepath.Join(t.TempDir(), "agent.sock")
	ln, err := Listen(path, NoGroup)
	if err != nil {
		t.Fatal(err)
	}
	if acc.GID == NoGroup && os.Geteuid() != 0 {
		// A normal user's run (make check): the server answers this
		// process's group, so the test's own client is let in.
		acc.GID = os.Getgid()
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, ln, src, slog.New(slog.NewTextHandler(io.Discard, nil)), acc) }()
	t.Cleanup(func() { cancel(); <-done })
	return &agentapi.Client{Socket: path}
}
