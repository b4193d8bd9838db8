package cli

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/internal/logrotate"
)

// callRecord is one line of the call log as a CNI call writes it.
func callRecord(container, msg string) string {
	rec := fmt.Sprintf(`{"time":%q,"role":"bridge","command":"ADD","container":%q,"ifname":"eth0","network":"web","took":1200000,"msg":%q`,
		time.Now().UTC().Format(time.RFC3339Nano), container, msg)
	if msg == "error" {
		rec += `,"code":7,"error":"mtu 5: want 68-65535"`
	}
	return rec + "}\n"
}

// every runs f every d on a goroutine of its own until the stop it
// returns is called; stop returns once f has ended and will not run again
// (a writer left running once wrote after its test had ended, into the
// test's directory while it was being removed).
func every(d time.Duration, f func()) (stop func()) {
	quit, ended := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(ended)
		tick := time.NewTicker(d)
		defer tick.Stop()
		for {
			select {
			case <-quit:
				return
			case <-tick.C:
				f()
			}
		}
	}()
	return func() { close(quit); <-ended }
}

// appendLine appends line to the log at path (t.Error on failure: it
// runs on a writer's goroutine too).
func appendLine(t *testing.T, path, line string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		t.Error(err)
		return
	}
	defer f.Close()
	if _, err := f.WriteString(line); err != nil {
		t.Error(err)
	}
}

// TestLogsTable: the table has a header whose columns start where each
// row's do, the rotated file's calls first; a missing log names the file
// and where to set it.
func TestLogsTable(t *testing.T) {
	path := t.TempDir() + "/cnibox.log"
	appendLine(t, path, callRecord("aaaaaaaaaaaaaaaa", "ok"))
	if err := logrotate.Rotate(path, time.Now(), 3); err != nil {
		t.Fatal(err)
	}
	appendLine(t, path, "not a record\n")
	appendLine(t, path, callRecord("bbbbbbbbbbbbbbbb", "error"))
	out, errs, code := runApp("logs", "--file", path)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 3 || lines[0] != logsHeader {
		t.Fatalf("cnibox logs: exit %d, stderr %q, stdout:\n%s", code, errs, out)
	}
	if !strings.Contains(lines[1], "aaaaaaaaaaaa ") || !strings.Contains(lines[2], "ERROR 7: mtu 5") {
		t.Errorf("rows not in the order written (the backup first):\n%s", out)
	}
	for _, col := range []struct{ head, val string }{{"ROLE", "bridge"}, {"VERB", "ADD"}, {"CONTAINER", "bbbbbbbbbbbb"},
		{"IFNAME", "eth0"}, {"NETWORK", "web"}, {"RESULT", "ERROR"}} {
		i := strings.Index(logsHeader, col.head)
		if i < 0 || !strings.HasPrefix(lines[2][i:], col.val) {
			t.Errorf("column %s starts at %d, where the row has %q", col.head, i, lines[2][min(i, len(lines[2])):])
		}
	}
	if out, _, _ := runApp("logs", "--file", path, "--json"); strings.Contains(out, "TIME") {
		t.Errorf("--json printed the header:\n%s", out)
	}
	missing := t.TempDir() + "/none.log"
	app := newApp(Options{Version: "test", Registry: cniplug.NewRegistry()})
	app.Writer, app.ErrWriter = io.Discard, io.Discard
	err := app.Run([]string{"cnibox", "logs", "--file", missing})
	if err == nil || !strings.Contains(err.Error(), missing) || !strings.Contains(err.Error(), "CNIBOX_LOG_FILE") {
		t.Errorf("missing log: %v", err)
	}
}

// TestLogsFollow: --follow alone shows the calls logged after it started,
// not those before, goes on in the new file after a rotation, and ends
// without an error when stopped.
func TestLogsFollow(t *testing.T) {
	path := t.TempDir() + "/cnibox.log"
	appendLine(t, path, callRecord("before0000000000", "ok"))
	app := newApp(Options{Version: "test", Registry: cniplug.NewRegistry()})
	pr, pw := io.Pipe()
	app.Writer, app.ErrWriter = pw, pw
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- app.RunContext(ctx, []string{"cnibox", "logs", "--file", path, "--follow"})
		pw.Close()
	}()
	timeout := time.AfterFunc(60*time.Second, cancel)
	defer timeout.Stop()
	lines := bufio.NewScanner(pr)
	// writeUntil appends a record of container every 100 ms until the
	// follower, which started at the file's end at some moment, shows one.
	writeUntil := func(container string) string {
		defer every(100*time.Millisecond, func() { appendLine(t, path, callRecord(container, "ok")) })()
		for lines.Scan() {
			if l := lines.Text(); l != logsHeader {
				return l
			}
		}
		return ""
	}
	first := writeUntil("after00000000000")
	if !strings.Contains(first, "after0000000") {
		t.Fatalf("--follow printed %q first, want a call logged after it started (not the one before)", first)
	}
	if err := logrotate.Rotate(path, time.Now(), 3); err != nil {
		t.Fatal(err)
	}
	var rotated string
	for rotated = writeUntil("rotated000000000"); strings.Contains(rotated, "after0000000"); rotated = writeUntil("rotated000000000") {
	}
	if !strings.Contains(rotated, "rotated00000") {
		t.Errorf("after the rotation --follow printed %q, want the new file's calls", rotated)
	}
	cancel()
	go io.Copy(io.Discard, pr)
	if err := <-done; err != nil {
		t.Errorf("--follow stopped: %v", err)
	}
}
