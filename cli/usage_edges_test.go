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
