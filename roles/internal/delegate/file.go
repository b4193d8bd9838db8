package delegate

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"strings"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/cnibox/cnibox/cniplug"
)

// File says how a role reads a file it takes a config from: what the file
// is, for messages, how much of it is read, and what a missing one means.
type File struct {
	// What names the file before its path in messages ("subnet file"; ""
	// for the path alone).
	What string
	// IsNot is what a file larger than Max is not ("flanneld's subnet.env").
	IsNot string
	// Max is the most bytes read.
	Max int
	// Missing is the error of a file that does not exist.
	Missing func(path string) error
}

// Read reads the file at path: a missing file is f.Missing's error, any
// other read error code 5 and a file larger than f.Max code 6.
func (f File) Read(path string) ([]byte, error) {
	name := strings.TrimSpace(f.What + " " + path)
	r, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, f.Missing(path)
	}
	if err != nil {
		return nil, cniplug.Errorf(types.ErrIOFailure, "read %s: %w", name, err)
	}
	defer r.Close()
	b, err := io.ReadAll(io.LimitReader(r, int64(f.Max)+1))
	if err != nil {
		return nil, cniplug.Errorf(types.ErrIOFailure, "read %s: %w", name, err)
	}
	if len(b) > f.Max {
		return nil, cniplug.Errorf(types.ErrDecodingFailure, "%s is larger than %d bytes: it is not %s", name, f.Max, f.IsNot)
	}
	return b, nil
}
