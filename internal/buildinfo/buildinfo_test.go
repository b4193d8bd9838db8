package buildinfo

import (
	"bytes"
	"runtime/debug"
	"testing"
)

// TestGet: the build's release and commit win; without them the release is
// DevRelease and the commit the toolchain's stamp; Write prints the
// release on the first line beside the name, the commit below.
func TestGet(t *testing.T) {
	stamp := func() (*debug.BuildInfo, bool) {
		return &debug.BuildInfo{Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "abc123"}, {Key: "vcs.modified", Value: "true"}}}, true
	}
	none := func() (*debug.BuildInfo, bool) { return nil, false }
	for _, c := range []struct {
		name, release, commit string
		read                  func() (*debug.BuildInfo, bool)
		want                  string
	}{
		{"set by the build", "v0.2.0", "0123abcd", none, "cnibox v0.2.0\nbuild: 0123abc\ncommit: 0123abcd\n"},
		{"dirty", "v0.2.0-3-g0123abc-dirty", "0123abcd-dirty", stamp, "cnibox v0.2.0-3-g0123abc-dirty\nbuild: 0123abc\ncommit: 0123abcd (with changes not committed)\n"},
		{"the toolchain's stamp", "", "", stamp, "cnibox v0.0.0-dev\nbuild: 0123abc\ncommit: abc123 (with changes not committed)\n"},
		{"nothing", "", "", none, "cnibox v0.0.0-dev\nbuild: 0123abc\ncommit: unknown (built without the Makefile's COMMIT or a VCS stamp)\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var b bytes.Buffer
			if err := get(c.release, c.commit, c.read).Write(&b, "cnibox", "0123abc"); err != nil || b.String() != c.want {
				t.Errorf("got %q (%v), want %q", b.String(), err, c.want)
			}
		})
	}
	var b bytes.Buffer
	if err := (Info{Release: "v1.0.0", Commit: "c"}).Write(&b, "x", "v1.0.0"); err != nil || b.String() != "x v1.0.0\ncommit: c\n" {
		t.Errorf("a build equal to the release is not said twice: %q", b.String())
	}
}
