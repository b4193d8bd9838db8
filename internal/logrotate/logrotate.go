// Package logrotate is the rename rotation of cnibox's append-only JSON
// logs: the CNI call log (cniplug) and the policy flow log
// (internal/flowlog). A full file is renamed to a backup beside it,
// name-<UTC time>.ext as lumberjack names them, the writer starts a new
// file at the path, and the oldest backups past a count are removed.
//
// Rename, never copy and truncate: a log shipper that follows the file by
// its inode (Fluent Bit, Vector) reads the renamed file to its end, and
// tail -F sees a new file at the path; nothing written is lost or read
// twice. What takes turns among writers (cniplug's flock, flowlog's mutex)
// is the caller's.
package logrotate

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
)

// backupTimeFormat is the UTC time in a backup's name, as lumberjack named
// them: cnibox-2006-01-02T15-04-05.000.log. It sorts as the time does.
const backupTimeFormat = "2006-01-02T15-04-05.000"

// Open opens the log file at path for appending, creating it with mode perm
// and its directory with dirPerm (both under the umask). The path may be a
// config's word: O_NOFOLLOW, a symlink planted in place of the log does not
// lead root to append to the file it names; O_NONBLOCK, a FIFO there does
// not hang the writer; anything at the path but a regular file is refused.
func Open(path string, perm, dirPerm fs.FileMode) (*os.File, error) {
	const flags = os.O_WRONLY | os.O_APPEND | os.O_CREATE | syscall.O_NOFOLLOW | syscall.O_NONBLOCK
	f, err := os.OpenFile(path, flags, perm)
	if errors.Is(err, fs.ErrNotExist) {
		if err := os.MkdirAll(filepath.Dir(path), dirPerm); err != nil {
			return nil, err
		}
		f, err = os.OpenFile(path, flags, perm)
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

// Rotate renames the log file at path to a backup rotated at t and removes
// all but the newest keep backups. The backup's name sorts after every
// backup already there, even when the clock went back since the last
// rotation, so that Backups keeps listing them in the order they were
// written.
func Rotate(path string, t time.Time, keep int) error {
	backups := Backups(path)
	if n := len(backups); n > 0 {
		if last, ok := BackupTime(path, backups[n-1]); ok && !t.After(last) {
			t = last.Add(time.Millisecond)
		}
	}
	b := backupName(path, t)
	if err := os.Rename(path, b); err != nil {
		return fmt.Errorf("rotate %s: %w", path, err)
	}
	backups = append(backups, b)
	for _, old := range backups[:max(0, len(backups)-keep)] {
		_ = os.Remove(old)
	}
	return nil
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

// BackupTime is the rotation time in the name of backup b of path (UTC),
// and whether b is named as a backup of path. Every line in b was written
// before it (by the clock of the writer that rotated it).
func BackupTime(path, b string) (time.Time, bool) {
	ext := filepath.Ext(path)
	prefix := strings.TrimSuffix(path, ext) + "-"
	if !strings.HasPrefix(b, prefix) || !strings.HasSuffix(b, ext) {
		return time.Time{}, false
	}
	t, err := time.Parse(backupTimeFormat, strings.TrimSuffix(strings.TrimPrefix(b, prefix), ext))
	return t, err == nil
}

// Backups lists the rotated files of the log file at path, oldest first:
// the files beside it named as backupName names them (and only those:
// another log, cnibox-dhcp.log beside cnibox.log, is not one).
func Backups(path string) []string {
	ext := filepath.Ext(path)
	matches, _ := filepath.Glob(strings.TrimSuffix(path, ext) + "-*" + ext)
	var out []string
	for _, m := range matches {
		if _, ok := BackupTime(path, m); ok {
			out = append(out, m)
		}
	}
	sort.Strings(out) // the time's format sorts as the time does
	return out
}
