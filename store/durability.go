package store

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	bolt "go.etcd.io/bbolt"
)

// How durable a commit is.
//
// Almost everything in the store describes the current boot: endpoints, port
// mappings, tuning and bandwidth records, and the reservations of pods that
// cannot outlive the kernel they run on (reboot reclaim releases them at the
// first ADD of the next boot). What carries over a reboot is soft: sticky
// addresses and round-robin cursors.
//
// So by default (SyncBoot) a commit is not flushed to the disk: every process
// on the node sees it at once through the page cache, and a killed process
// loses nothing. Only a kernel crash or a power loss can drop unflushed pages,
// and both start a new boot. The first open in a new boot therefore checks the
// whole file (bbolt's consistency check, once per boot); a file torn by such a
// crash is kept aside as cnibox.db.torn-<UTC time> and the store starts empty,
// so the node's CNI calls keep working instead of all failing on a corrupt
// store. A file that is corrupt although it was verified in this boot is
// reported as ErrCorrupt as before: its records may describe running pods.
//
// SyncAlways (CNIBOX_STORE_SYNC=always) flushes every commit (bbolt's two
// fdatasyncs: 0.3 to 1.4 ms a commit on a journaled ext4, measured), for
// nodes that want sticky addresses and cursors to survive a power loss.
const (
	// EnvSync selects the durability of commits: "boot" (default) or "always".
	EnvSync = "CNIBOX_STORE_SYNC"

	syncBoot   = "boot"
	syncAlways = "always"

	// verifiedSuffix names the file beside the store that holds the boot ID
	// of the boot in which the store was last checked.
	verifiedSuffix = ".verified"
)

// syncMode reads EnvSync through getenv.
func (o Options) syncMode() (string, error) {
	getenv := o.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	switch v := strings.TrimSpace(getenv(EnvSync)); v {
	case "", syncBoot:
		return syncBoot, nil
	case syncAlways:
		return syncAlways, nil
	default:
		return "", fmt.Errorf("%w: %s=%q: set it to %q (flush every commit) or %q (the default: commits reach the disk with the page cache; the file is checked once per boot)",
			ErrInvalidEnv, EnvSync, v, syncAlways, syncBoot)
	}
}

// openMarker opens the marker of the store at path. O_NOFOLLOW: a symlink
// planted in its place is not followed (root would read or overwrite the
// file it names); O_NONBLOCK: a FIFO there does not hang the open.
func openMarker(path string, flag int, perm os.FileMode) (*os.File, error) {
	return os.OpenFile(path+verifiedSuffix, flag|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, perm)
}

// markedBoot returns the boot ID in the store's marker ("" when there is
// none).
func markedBoot(path string) string {
	f, err := openMarker(path, os.O_RDONLY, 0)
	if err != nil {
		return ""
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 256))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// verifiedThisBoot reports whether the store at path was checked in this
// boot (its marker holds this boot's ID).
func verifiedThisBoot(path string) bool {
	id := BootID()
	return id != "" && markedBoot(path) == id
}

// markVerified records that the store at path was checked in this boot. A
// lost marker only means one more check: a symlink planted in its place
// fails the open (openMarker), and the marker is lost.
func markVerified(path string) {
	id := BootID()
	if id == "" {
		return
	}
	f, err := openMarker(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return
	}
	_, _ = f.WriteString(id + "\n")
	_ = f.Close()
}

// fromEarlierBoot reports whether the store at path was last checked in
// another boot than this one: whatever it holds was written before the last
// reboot (by the contract above, nothing in it describes a running pod). No
// marker (a store of an older cnibox, or of SyncAlways) is not evidence.
func fromEarlierBoot(path string) bool {
	m, id := markedBoot(path), BootID()
	return m != "" && id != "" && m != id
}

// verify reads the whole file: every bucket and key in one recovered
// transaction (a torn page panics in bbolt, which guard turns into
// ErrCorrupt), then, when that passed, bbolt's consistency check of the free
// list and page reachability.
func (s *Store) verify() error {
	var walk func(b *bolt.Bucket) error
	walk = func(b *bolt.Bucket) error {
		return b.ForEach(func(k, v []byte) error {
			if v == nil {
				return walk(b.Bucket(k))
			}
			return nil
		})
	}
	return s.view(func(tx *bolt.Tx) error {
		if err := tx.ForEach(func(_ []byte, b *bolt.Bucket) error { return walk(b) }); err != nil {
			return err
		}
		var errs []error
		for err := range tx.Check() { // drained: the check runs in its own goroutine
			if len(errs) < 10 {
				errs = append(errs, err)
			}
		}
		if len(errs) > 0 {
			return fmt.Errorf("%w: %w", ErrCorrupt, errors.Join(errs...))
		}
		return nil
	})
}

// setAsideIfSame renames the torn store at path out of the way, so that the
// next open creates a new one, and returns the name it now has. It holds the
// file's lock while it does, and leaves the file alone ("", nil) if it is no
// longer the one found torn (another process set it aside first).
func setAsideIfSame(path string, torn os.FileInfo, deadline time.Time, timeout time.Duration) (string, error) {
	f, err := openLocked(path, deadline, timeout)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !os.SameFile(fi, torn) {
		return "", nil
	}
	aside := path + ".torn-" + time.Now().UTC().Format("20060102T150405.000Z")
	if err := os.Rename(path, aside); err != nil {
		return "", fmt.Errorf("set the torn store %s aside: %w", path, err)
	}
	_ = os.Remove(path + verifiedSuffix)
	return aside, nil
}

// TornFiles lists the store files of dir that an open set aside as torn by
// an unclean shutdown (oldest first), for `cnibox doctor`.
func TornFiles(dir string) ([]string, error) {
	return filepath.Glob(filepath.Join(dir, FileName+".torn-*"))
}
