package hostlocal

import (
	"fmt"
	"io"
	"os"
	"syscall"
)

// maxConfigFile bounds the files a config names (rangeFromFile, resolvConf).
const maxConfigFile = 1 << 20

// readConfigFile reads a file that a config field names. Only a regular file
// of at most 1 MiB is read: a device (/dev/zero), a FIFO or a directory is
// refused instead of blocking the call or filling its memory.
func readConfigFile(path string) ([]byte, error) {
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
	b, err := io.ReadAll(io.LimitReader(f, maxConfigFile+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxConfigFile {
		return nil, fmt.Errorf("larger than %d bytes", maxConfigFile)
	}
	return b, nil
}
