// Package atomicfile is cnibox's one way to write a file that others read
// while it changes: the content goes to a new file beside the destination,
// is synced, and is renamed (or linked) over the destination, whose
// directory is synced in turn. A reader, and a node after a power cut, sees
// the old file or the new one, never an empty or partial one.
//
// The temporary file is named "." + base + ".<random>.tmp": unique (several
// processes may write the same destination at once), created with O_EXCL
// (which never follows a symlink planted under that name), hidden, and
// ending in .tmp, so that no reader that globs *.conf, *.json or a plain
// name takes one that a crash left behind for the real file. Its mode is
// set with fchmod, so the umask does not change it. The rename replaces a
// symlink at the destination instead of writing through it.
package atomicfile

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// testHookBeforeCommit, when set (by this package's tests only), runs after
// the content is synced and before the rename or link.
var testHookBeforeCommit func(tmp string)

// Pending is a new file under a temporary name beside its destination.
// Write to it (or hand Name to a library that opens it itself), then call
// Replace or CreateNew; defer Cleanup, which removes it unless it was
// committed.
type Pending struct {
	*os.File
	dest string
	done bool
}

// New creates the temporary file for dest, in dest's directory (which must
// exist), with mode.
func New(dest string, mode fs.FileMode) (*Pending, error) {
	f, err := createTemp(dest)
	if err != nil {
		return nil, err
	}
	if err := f.Chmod(mode); err != nil {
		f.Close()
		os.Remove(f.Name())
		return nil, err
	}
	return &Pending{File: f, dest: dest}, nil
}

// Replace syncs the file, renames it over the destination and syncs the
// directory.
func (p *Pending) Replace() error {
	if err := p.finish(); err != nil {
		return err
	}
	if err := os.Rename(p.Name(), p.dest); err != nil {
		return err
	}
	p.done = true
	return syncDir(filepath.Dir(p.dest))
}

// CreateNew is Replace for a destination that must not be replaced: the
// file is linked into place, and an existing destination is left alone (an
// error that matches fs.ErrExist). On a file system without hard links it
// falls back to a rename when the destination does not exist.
func (p *Pending) CreateNew() error {
	if err := p.finish(); err != nil {
		return err
	}
	err := os.Link(p.Name(), p.dest)
	if err != nil && !errors.Is(err, fs.ErrExist) {
		if _, serr := os.Lstat(p.dest); errors.Is(serr, fs.ErrNotExist) {
			err = os.Rename(p.Name(), p.dest)
		}
	}
	if err != nil {
		return err
	}
	p.done = true
	os.Remove(p.Name()) // after a link; a no-op after the rename
	return syncDir(filepath.Dir(p.dest))
}

// Cleanup closes the file and removes it unless Replace or CreateNew put it
// in place. It is safe to call more than once.
func (p *Pending) Cleanup() {
	p.File.Close()
	if !p.done {
		os.Remove(p.Name())
	}
}

// finish syncs and closes the file.
func (p *Pending) finish() error {
	err := p.Sync()
	if cerr := p.File.Close(); err == nil {
		err = cerr
	}
	if err == nil && testHookBeforeCommit != nil {
		testHookBeforeCommit(p.Name())
	}
	return err
}

// WriteFile writes data to path atomically, with mode. path's directory
// must exist.
func WriteFile(path string, data []byte, mode fs.FileMode) error {
	return WriteFrom(path, mode, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}

// WriteFrom writes what write writes to path atomically, with mode. An
// error of the file system names the temporary file (beside path, named
// after it).
func WriteFrom(path string, mode fs.FileMode, write func(io.Writer) error) error {
	p, err := New(path, mode)
	if err != nil {
		return err
	}
	defer p.Cleanup()
	if err := write(p); err != nil {
		return err
	}
	return p.Replace()
}

// Symlink points the symlink path at target, replacing whatever path is
// with one rename: a reader finds the old entry or the new link, never no
// entry.
func Symlink(target, path string) error {
	for attempt := 0; ; attempt++ {
		tmp, err := tempName(path)
		if err != nil {
			return err
		}
		err = os.Symlink(target, tmp)
		if errors.Is(err, fs.ErrExist) && attempt < 10 {
			continue
		}
		if err != nil {
			return err
		}
		if err := os.Rename(tmp, path); err != nil {
			os.Remove(tmp)
			return err
		}
		return syncDir(filepath.Dir(path))
	}
}

// tempName is a free temporary name beside path, as New makes them.
func tempName(path string) (string, error) {
	f, err := createTemp(path)
	if err != nil {
		return "", err
	}
	f.Close()
	return f.Name(), os.Remove(f.Name())
}

// createTemp creates a new file beside dest, named "." + base + ".<random>.tmp".
func createTemp(dest string) (*os.File, error) {
	return os.CreateTemp(filepath.Dir(dest), "."+filepath.Base(dest)+".*.tmp")
}

// syncDir makes a rename or link in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}
