package main

import (
	"encoding/json"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
)

// runCaptured runs argv with stdin empty and returns the exit code and what
// went to stdout.
func runCaptured(t *testing.T, argv []string) (int, string) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer devnull.Close()
	stdout, stdin := os.Stdout, os.Stdin
	os.Stdout, os.Stdin = w, devnull
	defer func() { os.Stdout, os.Stdin = stdout, stdin }()
	got := make(chan string)
	go func() {
		b, _ := io.ReadAll(r)
		got <- string(b)
	}()
	code := run(argv)
	w.Close()
	return code, <-got
}

// TestUnknownNameAnswersJSON: a name cnibox has no role for, called by a
// runtime (CNI_COMMAND set), answers every verb with CNI error JSON (code 4,
// naming the roles there are) instead of the CLI's help; without
// CNI_COMMAND, or as cnibox itself, it stays the CLI.
func TestUnknownNameAnswersJSON(t *testing.T) {
	t.Setenv("CNIBOX_LOG_FILE", "off")
	for _, verb := range []string{"VERSION", "ADD", "DEL", "CHECK", "GC", "STATUS", "EXPLODE"} {
		t.Run(verb, func(t *testing.T) {
			t.Setenv("CNI_COMMAND", verb)
			code, out := runCaptured(t, []string{"/opt/cni/bin/win-bridge"})
			var e types.Error
			if err := json.Unmarshal([]byte(out), &e); err != nil {
				t.Fatalf("win-bridge %s: stdout is not CNI error JSON: %v\n%s", verb, err, out)
			}
			if code != 1 || e.Code != types.ErrInvalidEnvironmentVariables || !strings.Contains(e.Msg, "win-bridge") || !strings.Contains(e.Msg, "bridge") {
				t.Errorf("win-bridge %s: exit %d, %+v; want exit 1, code 4 naming win-bridge and the roles", verb, code, e)
			}
		})
	}
	t.Run("cnibox with CNI_COMMAND", func(t *testing.T) {
		t.Setenv("CNI_COMMAND", "VERSION")
		if code, out := runCaptured(t, []string{"/usr/local/bin/cnibox", "roles"}); code != 0 || !strings.Contains(out, "bridge") || strings.Contains(out, `"code"`) {
			t.Errorf("cnibox roles: exit %d\n%s\nwant the CLI's list of roles", code, out)
		}
	})
	t.Run("no CNI_COMMAND", func(t *testing.T) {
		t.Setenv("CNI_COMMAND", "")
		if _, out := runCaptured(t, []string{"/opt/cni/bin/win-bridge"}); strings.Contains(out, `"code"`) {
			t.Errorf("win-bridge without CNI_COMMAND answered as a plugin:\n%s", out)
		}
	})
}
