package conffile_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/cnibox/cnibox/internal/conffile"
)

// TestReadNamed: a regular file and a symlink to one are read; a symlink
// to /dev/zero, a FIFO without a writer, a directory and a file over the
// limit are refused at once (no read without end, no wait), each error
// naming the file and matching ErrNotRegular or ErrTooLarge; a missing file
// is fs.ErrNotExist. As a normal user.
func TestReadNamed(t *testing.T) {
	dir := t.TempDir()
	at := func(name string) string { return filepath.Join(dir, name) }
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.WriteFile(at("good.conflist"), []byte(`{"name":"n"}`), 0o644))
	must(os.Symlink(at("good.conflist"), at("link.conflist")))
	must(os.Symlink("/dev/zero", at("zero.conflist")))
	must(syscall.Mkfifo(at("fifo.conflist"), 0o644))
	must(os.Mkdir(at("dir.conflist"), 0o755))
	must(os.WriteFile(at("big.conflist"), []byte(strings.Repeat(" ", 101)), 0o644))
	must(os.WriteFile(at("max.conflist"), []byte(strings.Repeat(" ", 100)), 0o644))

	for _, name := range []string{"good.conflist", "link.conflist"} {
		if b, err := conffile.ReadNamed(at(name), 100); err != nil || string(b) != `{"name":"n"}` {
			t.Errorf("%s: %q, %v", name, b, err)
		}
	}
	if b, err := conffile.ReadNamed(at("max.conflist"), 100); err != nil || len(b) != 100 {
		t.Errorf("a file of the limit: %d bytes, %v", len(b), err)
	}
	for _, tc := range []struct {
		name string
		is   error
		says string
	}{
		{"zero.conflist", conffile.ErrNotRegular, "character device"},
		{"fifo.conflist", conffile.ErrNotRegular, "named pipe"},
		{"dir.conflist", conffile.ErrNotRegular, "directory"},
		{"big.conflist", conffile.ErrTooLarge, "larger than 100 bytes"},
		{"missing.conflist", fs.ErrNotExist, "no such file"},
	} {
		_, err := conffile.ReadNamed(at(tc.name), 100)
		if !errors.Is(err, tc.is) || !strings.Contains(err.Error(), at(tc.name)) || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s: %v; want %v naming the file and saying %q", tc.name, err, tc.is, tc.says)
		}
	}
}
