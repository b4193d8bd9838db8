// Package conffile reads the files a plugin config names (host-local's
// rangeFromFile and resolvConf, cloud IPAM's pool file) without letting the
// file's type block or flood the call.
package conffile

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
	"syscall"
)

// ErrTooLarge: the file is larger than the limit the caller gave.
var ErrTooLarge = errors.New("file too large")

// ErrNotRegular: the path is not a regular file, nor a symlink to one.
var ErrNotRegular = errors.New("not a regular file")

// Read reads path if it is a regular file of at most max bytes. A device
// (/dev/zero), a FIFO or a directory is refused instead of blocking the call
// or filling its memory. A symlink is followed and what it points to judged
// (a conf dir's files may be symlinks: a ConfigMap volume's are): it is
// looked at before it is opened (no device is opened) and again, on the
// open file, after.
func Read(path string, max int64) ([]byte, error) {
	if st, err := os.Stat(path); err == nil && !st.Mode().IsRegular() {
		return nil, notRegular(st.Mode())
	}
	// O_NONBLOCK: opening a FIFO must not wait for a writer (one swapped
	// in after the look above).
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, notRegular(st.Mode())
	}
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("%w: larger than %d bytes", ErrTooLarge, max)
	}
	return b, nil
}

// ReadNamed is Read whose errors name the file, for reports that list
// files (cnibox check, doctor, install --conflist): "PATH: not a regular
// file (named pipe)", "PATH: file too large: larger than N bytes" (errors.Is
// ErrTooLarge); the operating system's errors name it already.
func ReadNamed(path string, max int64) ([]byte, error) {
	b, err := Read(path, max)
	var pe *fs.PathError
	if err != nil && !errors.As(err, &pe) {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return b, err
}

// notRegular is Read's error for a file of mode m that is not regular.
func notRegular(m fs.FileMode) error {
	what := map[fs.FileMode]string{fs.ModeDir: "a directory", fs.ModeNamedPipe: "a named pipe (FIFO)",
		fs.ModeSocket: "a socket", fs.ModeDevice: "a block device", fs.ModeDevice | fs.ModeCharDevice: "a character device"}[m.Type()]
	if what == "" {
		what = m.Type().String()
	}
	return fmt.Errorf("%w: %s", ErrNotRegular, what)
}

// JSONError describes an error of encoding/json decoding a file without
// quoting the file: where the JSON breaks (the byte offset), or which field
// holds which kind of value, never a character or a value of it. A file a
// config names may be any file on the node (/etc/shadow), and the message
// goes back to whoever wrote the config.
func JSONError(err error) string {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		return fmt.Sprintf("not valid JSON (at byte %d)", se.Offset)
	case errors.As(err, &te):
		kind, _, _ := strings.Cut(te.Value, " ") // "number 5": the kind only
		if te.Field == "" {
			return fmt.Sprintf("a JSON %s where %s is wanted", kind, te.Type)
		}
		return fmt.Sprintf("field %q is a JSON %s, not %s", te.Field, kind, te.Type)
	case errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF):
		return "not valid JSON (it ends early)"
	}
	return "not valid JSON, or a field this file may not hold"
}
