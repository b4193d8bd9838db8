package cniplug

import (
	"os"
	"time"

	"github.com/cnibox/cnibox/internal/filelock"
	"github.com/cnibox/cnibox/internal/logrotate"
)

const (
	// maxLogBytes is the size at which the log file is rotated.
	maxLogBytes = 10 << 20
	// maxLogBackups is how many rotated files are kept.
	maxLogBackups = 3
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

// openLog opens the log file for appending, creating it and its directory
// (logrotate.Open: no symlink followed, no FIFO waited on).
func openLog(path string) (*os.File, error) {
	return logrotate.Open(path, 0o600, 0o700)
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
	_ = logrotate.Rotate(path, time.Now(), maxLogBackups)
}

// LogBackups lists the rotated files of the log file at path, oldest
// first: the files beside it named cnibox-<UTC time>.log, as lumberjack
// named them (and only those: another log, cnibox-dhcp.log beside
// cnibox.log, is not one).
func LogBackups(path string) []string { return logrotate.Backups(path) }
