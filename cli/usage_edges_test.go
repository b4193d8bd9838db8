package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestUsageEdges: command lines a person gets wrong (issue 62, item 5)
// exit 64 with one line naming what to give, never a panic: an empty
// --bin-dir for check, doctor, inspect config and exec status; check
// with no argument. A config saved with a UTF-8 BOM is named as such.
func TestUsageEdges(t *testing.T) {
	dir := t.TempDir()
	conf := filepath.Join(dir, "10-a.conflist")
	if err := os.WriteFile(conf, []byte(`{"cniVersion":"1.0.0","name":"a","plugins":[{"type":"bridge"}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"check", "--bin-dir", "", dir},
		{"check", "--bin-dir", ":", dir},
		{"doctor", "--bin-dir", "", "--conf-dir", dir},
		{"inspect", "config", "--bin-dir", "", "--conf-dir", dir},
		{"exec", "status", "--bin-dir", "", "--conf", conf},
	} {
		_, stderr, code := runApp(args...)
		if code != exitUsage || !strings.Contains(stderr, "--bin-dir") || strings.Contains(stderr, "panic") {
			t.Errorf("cnibox %s: exit %d, stderr %q; want %d naming --bin-dir", strings.Join(args, " "), code, stderr, exitUsage)
		}
	}
	if _, stderr, code := runApp("check"); code != exitUsage || !strings.Contains(stderr, "name a config file or directory") {
		t.Errorf("cnibox check: exit %d, %q; want %d naming what to give", code, stderr, exitUsage)
	}

	bom := filepath.Join(t.TempDir(), "10-bom.conflist")
	if err := os.WriteFile(bom, append([]byte{0xEF, 0xBB, 0xBF}, `{"cniVersion":"1.0.0","name":"a","plugins":[{"type":"bridge"}]}`...), 0o644); err != nil {
		t.Fatal(err)
	}
	stdout, _, code := runApp("check", bom)
	if code != 1 || !strings.Contains(stdout, "byte order mark (BOM)") {
		t.Errorf("cnibox check of a file with a BOM: exit %d, %q; want 1 and the BOM named", code, stdout)
	}
}

// TestCheckLateFlags: flags after the files are flags (`cnibox check DIR
// --json`), not files; "--" makes what follows a file whatever it looks
// like; an unknown flag there is a usage error.
func TestCheckLateFlags(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "10-a.conflist"), []byte(`{"cniVersion":"1.0.0","name":"a","plugins":[{"type":"no-such-plugin"}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, code := runApp("check", dir, "--json", "--bin-dir", dir)
	if code != 1 || !strings.HasPrefix(strings.TrimSpace(stdout), "{") || strings.Contains(stdout, "--json") {
		t.Errorf("check DIR --json --bin-dir DIR: exit %d, stdout %q, stderr %q; want 1 and JSON", code, stdout, stderr)
	}
	if _, stderr, code := runApp("check", dir, "--no-such-flag"); code != exitUsage || !strings.Contains(stderr, "--no-such-flag") {
		t.Errorf("check DIR --no-such-flag: exit %d, %q; want %d", code, stderr, exitUsage)
	}
	dash := filepath.Join(dir, "-x.conflist")
	if err := os.WriteFile(dash, []byte(`{"cniVersion":"1.0.0","name":"x","plugins":[{"type":"bridge"}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if stdout, _, _ := runApp("check", "--", dash); !strings.Contains(stdout, "-x.conflist") {
		t.Errorf("check -- FILE starting with '-': %q, want the file checked", stdout)
	}
}

// TestExecEdges: exec status of a network below CNI 1.1.0 says that no
// STATUS was sent instead of "ready"; exec without a network and inspect
// topology with an unknown format are usage errors (64).
func TestExecEdges(t *testing.T) {
	dir := t.TempDir()
	conf := filepath.Join(dir, "10-old.conflist")
	if err := os.WriteFile(conf, []byte(`{"cniVersion":"0.4.0","name":"old","plugins":[{"type":"fake"}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	// a foreign plugin in the bin dir (never run: 0.4.0 has no STATUS)
	if err := os.WriteFile(filepath.Join(dir, "fake"), []byte("#!/bin/sh\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, code := runApp("exec", "status", "--conf", conf, "--bin-dir", dir)
	if out := stdout + stderr; strings.Contains(out, "is ready") || !strings.Contains(out, "none was sent") {
		t.Errorf("exec status of a 0.4.0 network: exit %d, %q; want no STATUS said, not ready", code, out)
	}
	for _, args := range [][]string{{"exec", "add"}, {"exec", "status"}, {"inspect", "topology", "--format", "yaml"}} {
		if _, stderr, code := runApp(args...); code != exitUsage {
			t.Errorf("cnibox %s: exit %d (%q), want %d", strings.Join(args, " "), code, stderr, exitUsage)
		}
	}
}
