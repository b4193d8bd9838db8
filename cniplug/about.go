package cniplug

import (
	"fmt"
	"strings"
)

// ReferenceVersion is the containernetworking/plugins release whose behaviour
// a role has when its Role.Version is empty.
const ReferenceVersion = "1.9.1"

// VersionLine is the first stderr line of a role run without CNI_COMMAND:
// "CNI <type> plugin v<semver>", the form the reference plugins print (their
// buildversion.BuildString, set from the release tag). Clients read it to
// learn what a plugin can do: nerdctl runs firewall with no arguments and
// parses this line as semver to decide whether it has ingressPolicy
// (>= 1.1.0) and "isolated" (>= 1.7.1). The version is the reference release
// whose behaviour the role has; cnibox's own build version rides along as
// semver build metadata (+cnibox.<build>), which semver ordering ignores, so
// the line compares equal to the reference release.
func VersionLine(role *Role, build string) string {
	v := role.Version
	if v == "" {
		v = ReferenceVersion
	}
	line := fmt.Sprintf("CNI %s plugin v%s", role.Name, v)
	if md := buildMetadata(build); md != "" {
		line += "+cnibox." + md
	}
	return line
}

// buildMetadata turns a build version (git describe: "v0.4.0-12-gabc1234-dirty",
// a bare commit, "dev") into semver build metadata identifiers: the leading
// "v" goes, every character outside [0-9A-Za-z-.] becomes '-', and empty
// identifiers (".." or a dot at either end) are dropped.
func buildMetadata(build string) string {
	build = strings.TrimPrefix(build, "v")
	mapped := strings.Map(func(r rune) rune {
		switch {
		case r >= '0' && r <= '9', r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r == '-', r == '.':
			return r
		}
		return '-'
	}, build)
	var ids []string
	for _, id := range strings.Split(mapped, ".") {
		if id != "" {
			ids = append(ids, id)
		}
	}
	return strings.Join(ids, ".")
}

// isRelease reports whether v is MAJOR.MINOR.PATCH, each a decimal number
// without leading zeros: what Role.Version must be.
func isRelease(v string) bool {
	parts := strings.Split(v, ".")
	if len(parts) != 3 {
		return false
	}
	for _, p := range parts {
		if p == "" || (len(p) > 1 && p[0] == '0') || strings.Trim(p, "0123456789") != "" {
			return false
		}
	}
	return true
}
