package whereabouts

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cnibox/cnibox/internal/conffile/conffiletest"
)

// TestLogFileNoFollow: log_file is written only as a regular file of its
// own: a new one is mode 0600, and a symlink there (to a file, or to one
// not yet there) is never written through.
func TestLogFileNoFollow(t *testing.T) {
	dir := t.TempDir()
	cfg := &config{LogLevel: "debug"}

	cfg.LogFile = filepath.Join(dir, "wb.log")
	cfg.logf(nil, "debug", "first %d", 1)
	fi, err := os.Stat(cfg.LogFile)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("new log_file: %v, %v; want mode 0600", fi, err)
	}
	if b, _ := os.ReadFile(cfg.LogFile); !strings.Contains(string(b), "[debug] first 1") {
		t.Errorf("log_file holds %q", b)
	}

	conffiletest.NoFollow(t, dir, func(link string) {
		cfg.LogFile = link
		cfg.logf(nil, "error", "through the link")
	})
}
