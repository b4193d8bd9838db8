package cniplug

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/cnibox/cnibox/internal/filelock"
)

const (
	// maxLogBytes is the size at which the log file is rotated.
	maxLogBytes = 10 << 20
	// maxLogBackups is how many rotated files are kept.
	maxLogBackups = 3
	// backupTimeFormat is the UTC time in a backup's name, as lumberjack
	// named them: cnibox-2006-01-02T15-04-05.000.log.
	backupTimeFormat = "2006-01-02T15-04-05.000"
	// rotateWait bounds the wait for another process's rotation; past it
	// the record goes to the file as it is.
	rotateWait = 2 * time.Second
)

// appendRecord appends one record to the log file at path, creating it
// (mode 0600, its directory 0700) if needed. The common case is one
// open(O_APPEND) and one write. A record that would take the file past
// maxLogBytes rotates it first, under the file's flock(2): of the many CNI
// processes that cross the mark at once exactly one renames the file to a
// backup and prunes the backups to maxLogBackups (before it returns: a CNI
// process lives milliseconds); the others wait for it, see that the file
// at path is a new one, and append there. A record written meanwhile to
// the old file through an earlier open lands in the backup. Logging never
// fails a call: what cannot be written is skipped.
func appendRecord(path string, rec []byte) {
	f, err := openLog(path)
	if err != nil {
		return
	}
	if st, err := f.Stat(); err == nil && st.Size()+int64(len(rec)) >= maxLogBytes {
		rotate(path, f)
		if f, err = openLog(path); err != nil {
			return
		}
	}
	_, _ = f.Write(rec)
	_ = f.Close()
}

// openLog opens the log file for appending, creating it and its directory.
// The path is the config's word (logFile): O_NOFOLLOW, a symlink planted in
// place of the log does not lead root to append to the file it names;
// O_NONBLOCK, a FIFO there does not hang the call; anything at the path but
// a regular file is left alone.
func openLog(path string) (*os.File, error) {
	const flags = os.O_WRONLY | os.O_APPEND | os.O_CREATE | syscall.O_NOFOLLOW | syscall.O_NONBLOCK
	f, err := os.OpenFile(path, flags, 0o600)
	if errors.Is(err, fs.ErrNotExist) {
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return nil, err
		}
		f, err = os.OpenFile(path, flags, 0o600)
	}
	if err != nil {
		return nil, err
	}
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("log file %q: not a regular file", path)
	}
	return f, nil
}

// rotate takes full's lock and, unless another process rotated it while
// this one waited, renames it to a backup and prunes the backups. full is
// closed (or handed to the lock's waiter).
func rotate(path string, full *os.File) {
	if err := filelock.Lock(full, time.Now().Add(rotateWait)); err != nil {
		return // a stuck rotation: append as things are
	}
	defer full.Close() // drops the lock, after the pruning
	st, err := full.Stat()
	cur, lerr := os.Lstat(path)
	if err != nil || lerr != nil || !os.SameFile(cur, st) {
		return // rotated by another process meanwhile
	}
	if os.Rename(path, backupName(path, time.Now())) != nil {
		return
	}
	backups := LogBackups(path)
	for _, b := range backups[:max(0, len(backups)-maxLogBackups)] {
		_ = os.Remove(b)
	}
}

// backupName is a free name for a backup of path rotated at t:
// dir/name-<UTC time>.ext, as lumberjack named them.
func backupName(path string, t time.Time) string {
	ext := filepath.Ext(path)
	for {
		b := strings.TrimSuffix(path, ext) + "-" + t.UTC().Format(backupTimeFormat) + ext
		if _, err := os.Lstat(b); errors.Is(err, fs.ErrNotExist) {
			return b
		}
		t = t.Add(time.Millisecond)
	}
}

// LogBackups lists the rotated files of the log file at path, oldest
// first: the files beside it named as backupName names them (and only
// those: another log, cnibox-dhcp.log beside cnibox.log, is not one).
func LogBackups(path string) []string {
	ext := filepath.Ext(path)
	prefix := strings.TrimSuffix(path, ext) + "-"
	matches, _ := filepath.Glob(prefix + "*" + ext)
	var out []string
	for _, m := range matches {
		ts := strings.TrimSuffix(strings.TrimPrefix(m, prefix), ext)
		if _, err := time.Parse(backupTimeFormat, ts); err == nil {
			out = append(out, m)
		}
	}
	sort.Strings(out) // the time's format sorts as the time does
	return out
}
