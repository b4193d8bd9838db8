package cniplug

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
)

// TestPanicAnswersJSON: a role that panics in the middle of an ADD, after a
// step it recorded an undo for, answers CNI error JSON with the internal
// error code, its undo steps run, and the stack trace goes to stderr, not
// stdout.
func TestPanicAnswersJSON(t *testing.T) {
	undone := false
	role := &Role{Name: "boom", Verbs: &ConfVerbs[NoConf]{Add: func(ctx context.Context, a *Args, _ NoConf) (res types.Result, err error) {
		var undo Undo
		defer undo.Finish(&err)
		undo.Push(func() { undone = true })
		var m map[string]int
		//lint:ignore SA5000 the panic this test recovers from
		m["step"]++ // a bug: assignment to a nil map
		return nil, nil
	}}}
	logFile := filepath.Join(t.TempDir(), "cnibox.log")
	env := map[string]string{"CNI_COMMAND": "ADD", "CNI_CONTAINERID": "c1", "CNI_NETNS": "/run/netns/x",
		"CNI_IFNAME": "eth0", "CNI_PATH": "/opt/cni/bin", "CNIBOX_LOG_FILE": logFile}
	var out, errOut bytes.Buffer
	code := Main(context.Background(), role, Invocation{Getenv: func(k string) string { return env[k] },
		Stdin: strings.NewReader(`{"cniVersion":"1.0.0","name":"n","type":"boom"}`), Stderr: &errOut}, &out)
	if code != 1 {
		t.Errorf("exit code %d, want 1", code)
	}
	var e types.Error
	if err := json.Unmarshal(out.Bytes(), &e); err != nil {
		t.Fatalf("stdout is not CNI error JSON: %v\n%s", err, out.String())
	}
	if e.Code != CodeInternal || !strings.Contains(e.Msg, "nil map") {
		t.Errorf("answer %+v, want code %d naming the panic", e, CodeInternal)
	}
	if !undone {
		t.Error("the undo step of the ADD did not run")
	}
	if !strings.Contains(errOut.String(), "panic.go") && !strings.Contains(errOut.String(), "goroutine") {
		t.Errorf("stderr has no stack trace:\n%s", errOut.String())
	}
	var rec struct {
		Code  uint   `json:"code"`
		Stack string `json:"stack"`
	}
	if b, err := os.ReadFile(logFile); err != nil || json.Unmarshal(b, &rec) != nil {
		t.Fatalf("log file: %v\n%s", err, b)
	}
	if rec.Code != CodeInternal || !strings.Contains(rec.Stack, "goroutine") {
		t.Errorf("log record: code %d, stack %q; want code %d and the stack trace", rec.Code, rec.Stack, CodeInternal)
	}
}
