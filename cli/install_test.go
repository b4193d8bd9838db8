package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestInstall(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(t.TempDir(), "cnibox")
	if err := os.WriteFile(target, []byte("#!/bin/true\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	names := []string{"bridge", "host-local", "loopback"}

	out, err := Install(dir, target, names, false)
	if err != nil {
		t.Fatalf("first install: %v", err)
	}
	for i, n := range names {
		if link, err := os.Readlink(filepath.Join(dir, n)); err != nil || link != target {
			t.Errorf("%s -> %q (%v), want %s", n, link, err, target)
		}
		if !strings.HasPrefix(out[i], "linked") {
			t.Errorf("first install line %q, want linked", out[i])
		}
	}

	out, err = Install(dir, target, names, false)
	if err != nil {
		t.Fatalf("second install: %v", err)
	}
	for _, line := range out {
		if !strings.HasPrefix(line, "ok") {
			t.Errorf("second install line %q, want ok (idempotent)", line)
		}
	}

	// A foreign plugin binary is not replaced without --force.
	foreign := filepath.Join(dir, "bridge")
	os.Remove(foreign)
	if err := os.WriteFile(foreign, []byte("reference bridge"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := Install(dir, target, names, false); err == nil || !strings.Contains(err.Error(), "--force") {
		t.Errorf("install over a foreign file: err = %v, want one naming --force", err)
	}
	if b, _ := os.ReadFile(foreign); string(b) != "reference bridge" {
		t.Errorf("foreign file was changed without --force")
	}
	if _, err := Install(dir, target, names, true); err != nil {
		t.Fatalf("install --force: %v", err)
	}
	if link, _ := os.Readlink(foreign); link != target {
		t.Errorf("after --force bridge -> %q, want %s", link, target)
	}
	// A link to somewhere else is not ours either.
	other := filepath.Join(dir, "loopback")
	os.Remove(other)
	os.Symlink("/usr/lib/cni/loopback", other)
	if _, err := Install(dir, target, names, false); err == nil {
		t.Errorf("install over a link to another binary succeeded without --force")
	}
}
