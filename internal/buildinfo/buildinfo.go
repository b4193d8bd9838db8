// Package buildinfo says which release and commit a binary of this module
// is, the same way for cnibox, cnibox-agent and cnibox-dhcp, as kubectl
// prints a release beside its commit: the release is what the build sets
// (the Makefile's RELEASE: git describe --tags of a v* tag), else
// DevRelease; the commit is what the build sets (the Makefile's COMMIT,
// "-dirty" when the tree had changes), else the Go toolchain's VCS stamp
// when it made one.
package buildinfo

import (
	"fmt"
	"io"
	"runtime/debug"
	"strings"
)

// Release and Commit are set by the build:
//
//	-ldflags "-X github.com/cnibox/cnibox/internal/buildinfo.Release=v0.2.0
//	          -X github.com/cnibox/cnibox/internal/buildinfo.Commit=<sha>[-dirty]"
var Release, Commit string

// DevRelease is the release of a build that set none (no v* tag, or not
// built by the Makefile).
const DevRelease = "v0.0.0-dev"

// Info is a binary's release and commit.
type Info struct {
	Release  string `json:"version"`
	Commit   string `json:"commit,omitempty"`
	Modified bool   `json:"modified,omitempty"`
}

// Get is this binary's Info.
func Get() Info {
	return get(Release, Commit, debug.ReadBuildInfo)
}

func get(release, commit string, read func() (*debug.BuildInfo, bool)) Info {
	i := Info{Release: release}
	if i.Release == "" {
		i.Release = DevRelease
	}
	if commit != "" {
		i.Commit, i.Modified = strings.CutSuffix(commit, "-dirty")
		return i
	}
	if bi, ok := read(); ok {
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				i.Commit = s.Value
			case "vcs.modified":
				i.Modified = s.Value == "true"
			}
		}
	}
	return i
}

// Write prints what `NAME --version` prints: "NAME RELEASE", then the
// build (git describe's, when given) and the commit (when known), a line
// each.
func (i Info) Write(w io.Writer, name, build string) error {
	fmt.Fprintf(w, "%s %s\n", name, i.Release)
	if build != "" && build != i.Release {
		fmt.Fprintf(w, "build: %s\n", build)
	}
	if i.Commit == "" {
		_, err := fmt.Fprintln(w, "commit: unknown (built without the Makefile's COMMIT or a VCS stamp)")
		return err
	}
	mod := ""
	if i.Modified {
		mod = " (with changes not committed)"
	}
	_, err := fmt.Fprintf(w, "commit: %s%s\n", i.Commit, mod)
	return err
}
