package main

import (
	"bytes"
	"testing"

	"github.com/cnibox/cnibox/internal/buildinfo"
)

// TestVersion: --version (and -version, version) prints the release and
// the commit as cnibox and cnibox-agent do (internal/buildinfo), then
// exits 0, where the daemon's flags refused it.
func TestVersion(t *testing.T) {
	defer func(r, c, v string) { buildinfo.Release, buildinfo.Commit, version = r, c, v }(buildinfo.Release, buildinfo.Commit, version)
	buildinfo.Release, buildinfo.Commit, version = "v0.2.0", "0123abcdef-dirty", "0123abc-dirty"
	for _, arg := range []string{"--version", "-version", "version"} {
		var out bytes.Buffer
		if code := run([]string{arg}, &out); code != 0 ||
			out.String() != "cnibox-dhcp v0.2.0\nbuild: 0123abc-dirty\ncommit: 0123abcdef (with changes not committed)\n" {
			t.Errorf("%s: exit %d, %q", arg, code, out.String())
		}
	}
}
