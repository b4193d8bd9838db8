package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/cnibox/cnibox/internal/buildinfo"
)

// TestVersion: --version prints the release and the commit (as cnibox and
// cnibox-dhcp do, internal/buildinfo), then the build, and exits 0.
func TestVersion(t *testing.T) {
	defer func(r, c, v string) { buildinfo.Release, buildinfo.Commit, version = r, c, v }(buildinfo.Release, buildinfo.Commit, version)
	buildinfo.Release, buildinfo.Commit, version = "v0.2.0", "0123abcdef", "0123abc"
	var out, errb bytes.Buffer
	if code := run([]string{"--version"}, &out, &errb); code != 0 || out.String() != "cnibox-agent v0.2.0\nbuild: 0123abc\ncommit: 0123abcdef\n" {
		t.Errorf("--version: exit %d, %q, stderr %q", code, out.String(), errb.String())
	}
	buildinfo.Release, buildinfo.Commit = "", ""
	out.Reset()
	if code := run([]string{"--version"}, &out, &errb); code != 0 || !strings.HasPrefix(out.String(), "cnibox-agent "+buildinfo.DevRelease+"\n") || !strings.Contains(out.String(), "\ncommit: ") {
		t.Errorf("--version of a build that set no release: exit %d, %q", code, out.String())
	}
}
