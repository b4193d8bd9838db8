package delegate

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/cnibox/cnibox/cniplug"
)

func TestFileRead(t *testing.T) {
	dir := t.TempDir()
	small, large := filepath.Join(dir, "small"), filepath.Join(dir, "large")
	if err := os.WriteFile(small, []byte("FLANNEL_MTU=1450\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(large, make([]byte, 33), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := errors.New("missing")
	f := File{What: "subnet file", IsNot: "flanneld's subnet.env", Max: 32, Missing: func(string) error { return missing }}
	for _, tc := range []struct {
		name, path string
		code       uint // 0: read
		is         error
		msg        string
	}{
		{"read", small, 0, nil, ""},
		{"missing", filepath.Join(dir, "nope"), 0, missing, ""},
		{"too large", large, types.ErrDecodingFailure, nil, "subnet file " + large + " is larger than 32 bytes: it is not flanneld's subnet.env"},
		{"a directory", dir, types.ErrIOFailure, nil, "read subnet file " + dir + ": "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := f.Read(tc.path)
			switch {
			case tc.is != nil:
				if !errors.Is(err, tc.is) {
					t.Fatalf("err %v, want Missing's", err)
				}
			case tc.code != 0:
				if cniplug.CodeOf(err) != tc.code || !strings.HasPrefix(err.Error(), tc.msg) {
					t.Fatalf("err %v (code %d), want code %d and %q", err, cniplug.CodeOf(err), tc.code, tc.msg)
				}
			case err != nil || string(b) != "FLANNEL_MTU=1450\n":
				t.Fatalf("got %q, %v", b, err)
			}
		})
	}
}
