package cli

import (
	"os"
	"strings"
	"testing"

	"github.com/cnibox/cnibox/internal/testenv"
)

// TestDoctorDataDirWritable: doctor warns about a data directory users other
// than root can write, and says nothing about one only root can.
func TestDoctorDataDirWritable(t *testing.T) {
	if !testenv.Root() {
		t.Skip("the data directory must be root's for the quiet case")
	}
	for _, tc := range []struct {
		mode os.FileMode
		warn string
	}{
		{0o700, ""},
		{0o755, ""},
		{0o775, "its group"},
		{0o777, "every user"},
	} {
		t.Run(tc.mode.String(), func(t *testing.T) {
			dir := t.TempDir()
			if err := os.Chmod(dir, tc.mode); err != nil {
				t.Fatal(err)
			}
			d := &doctor{}
			d.checkDataDirMode(dir)
			if tc.warn == "" {
				if len(d.results) != 0 {
					t.Errorf("mode %s: %+v, want no line", tc.mode, d.results)
				}
				return
			}
			if len(d.results) != 1 || d.results[0].Status != statusWarn || !strings.Contains(d.results[0].Detail, tc.warn) {
				t.Errorf("mode %s: %+v, want a warning naming %q", tc.mode, d.results, tc.warn)
			}
		})
	}
}
