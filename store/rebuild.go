package store

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"
)

// Rebuild replaces the store file in dir with a new one that fill writes
// through the usual operations (PutEndpoint, IPAM ...). The swap is atomic: a
// CNI call sees the old file or the new one, never none. Rebuild first takes
// the old file's lock (waiting at most the store timeout), so no call is half
// way through it; calls that were waiting for that lock notice the swap and
// open the new file. The old file is kept as cnibox.db.broken-<UTC time>, whose
// path is returned ("" when there was no old file). If fill fails, nothing
// changes.
func Rebuild(dir string, o Options, fill func(*Store) error) (backup string, err error) {
	timeout, err := o.timeout()
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, FileName)
	old, err := openLocked(path, time.Now().Add(timeout), timeout)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		old = nil
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return "", fmt.Errorf("create store directory %s: %w", dir, err)
		}
	case err != nil:
		return "", err
	default:
		defer old.Close()
	}

	p, err := newFile(path, fill)
	if err != nil {
		return "", fmt.Errorf("rebuild store %s: %w", path, err)
	}
	defer p.Cleanup() // a no-op once it is in place
	if old != nil {
		backup = path + ".broken-" + time.Now().UTC().Format("20060102T150405.000Z")
		if err := os.Link(path, backup); err != nil {
			return "", fmt.Errorf("rebuild store %s: keep the old file as %s: %w", path, backup, err)
		}
	}
	if err := p.Replace(); err != nil {
		return "", fmt.Errorf("rebuild store %s: %w", path, err)
	}
	return backup, nil
}

// relockIfReplaced returns f, locked, if it is still the file at path.
// Otherwise the file was replaced (Rebuild) while the caller waited for its
// lock: f is closed and the file now at path is opened and locked instead.
func relockIfReplaced(f *os.File, path string, deadline time.Time, timeout time.Duration) (*os.File, error) {
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	pi, err := os.Lstat(path)
	if err == nil && os.SameFile(fi, pi) {
		return f, nil
	}
	f.Close()
	if err != nil {
		// Gone (moved away while we waited): OpenWith creates a new one.
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	return openLocked(path, deadline, timeout)
}
