// Package conffiletest checks, for tests, that a file a config names is
// written the way internal/conffile's rules say: never through a symlink.
package conffiletest

import (
	"os"
	"path/filepath"
	"testing"
)

// NoFollow puts at two paths of dir a symlink, one to an existing file and
// one to a file not yet there, calls write with each, and fails t if the
// existing file changed or the missing one was created.
func NoFollow(t *testing.T, dir string, write func(path string)) {
	t.Helper()
	target := filepath.Join(dir, "shadow")
	if err := os.WriteFile(target, []byte("root:x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "cron-evil")
	for _, to := range []string{target, missing} {
		link := filepath.Join(dir, "link-"+filepath.Base(to))
		if err := os.Symlink(to, link); err != nil {
			t.Fatal(err)
		}
		write(link)
	}
	if b, _ := os.ReadFile(target); string(b) != "root:x\n" {
		t.Errorf("the symlink's target was written: %q", b)
	}
	if _, err := os.Lstat(missing); err == nil {
		t.Errorf("a dangling symlink's target was created")
	}
}
