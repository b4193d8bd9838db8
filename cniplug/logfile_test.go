package cniplug

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/cnibox/cnibox/internal/conffile/conffiletest"
)

// TestLogFileNoFollow: the call log (logFile, the config's word) is
// created with mode 0600 and appended to, and a symlink at its path (to a
// file, or to one not yet there) is never written through.
func TestLogFileNoFollow(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "log", "cnibox.log")
	appendRecord(path, []byte("one\n"))
	appendRecord(path, []byte("two\n"))
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("new log file: %v, %v; want mode 0600", fi, err)
	}
	if b, _ := os.ReadFile(path); string(b) != "one\ntwo\n" {
		t.Errorf("log file holds %q", b)
	}

	conffiletest.NoFollow(t, dir, func(link string) { appendRecord(link, []byte("record\n")) })
}
