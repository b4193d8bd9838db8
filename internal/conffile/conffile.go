// Package conffile reads the files a plugin config names (host-local's
// rangeFromFile and resolvConf, cloud IPAM's pool file) without letting the
// file's type block or flood the call.
package conffile

import (
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
)

// ErrTooLarge: the file is larger than the limit the caller gave.
var ErrTooLarge = errors.New("file too large")

// Read reads path if it is a regular file of at most max bytes. A device
// (/dev/zero), a FIFO or a directory is refused instead of blocking the call
// or filling its memory.
func Read(path string, max int64) ([]byte, error) {
	// O_NONBLOCK: opening a FIFO must not wait for a writer.
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
		return nil, fmt.Errorf("not a regular file (%s)", st.Mode().Type())
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
