package cniplug

import (
	"bytes"
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
)

func TestVersionLine(t *testing.T) {
	bridge := &Role{Name: "bridge"}
	old := &Role{Name: "firewall", Version: "1.1.0"}
	for _, tc := range []struct {
		role  *Role
		build string
		want  string
	}{
		{bridge, "v0.4.0-12-gabc1234-dirty", "CNI bridge plugin v1.9.1+cnibox.0.4.0-12-gabc1234-dirty"},
		{bridge, "dev", "CNI bridge plugin v1.9.1+cnibox.dev"},
		{bridge, "abc1234", "CNI bridge plugin v1.9.1+cnibox.abc1234"},
		{bridge, "", "CNI bridge plugin v1.9.1"},
		{bridge, "v", "CNI bridge plugin v1.9.1"},
		{bridge, ".a b/c..d_e.", "CNI bridge plugin v1.9.1+cnibox.a-b-c.d-e"},
		{old, "v1.0.0", "CNI firewall plugin v1.1.0+cnibox.1.0.0"},
	} {
		if got := VersionLine(tc.role, tc.build); got != tc.want {
			t.Errorf("VersionLine(%s, %q) = %q, want %q", tc.role.Name, tc.build, got, tc.want)
		}
	}
}

func TestRoleVersionChecked(t *testing.T) {
	add := func(context.Context, *Args, NoConf) (types.Result, error) { return nil, nil }
	for v, ok := range map[string]bool{"": true, "1.9.1": true, "10.0.12": true, "v1.9.1": false, "1.9": false, "01.9.1": false, "1.9.1-rc1": false, "1..1": false} {
		func() {
			defer func() {
				if r := recover(); (r == nil) != ok {
					t.Errorf("Version %q: panic %v, want accepted=%v", v, r, ok)
				}
			}()
			NewRegistry(&Role{Name: "x", Version: v, Verbs: &ConfVerbs[NoConf]{Add: add}})
		}()
	}
}

// TestVersionLineFirst: a role run without CNI_COMMAND prints the version
// line as its first stderr line, then the explanation, and nothing on stdout.
func TestVersionLineFirst(t *testing.T) {
	var seen []*Args
	role := echoRole(&seen)
	role.About = "Echo: answers one address."
	var out, errOut bytes.Buffer
	code := Main(context.Background(), role, Invocation{Getenv: func(string) string { return "" }, Stdin: strings.NewReader(""), Stderr: &errOut, Version: "v0.4.0"}, &out)
	first, rest, _ := strings.Cut(errOut.String(), "\n")
	if code != 0 || out.Len() != 0 || first != "CNI echo plugin v1.9.1+cnibox.0.4.0" || !strings.HasPrefix(rest, role.About+"\n") {
		t.Errorf("no CNI_COMMAND: exit %d, stdout %q, stderr %q", code, out.String(), errOut.String())
	}
}

// The reimplementation of nerdctl's reading of the line, from
// containerd/nerdctl pkg/netutil/netutil_unix.go (guessFirewallPluginVersion
// and FirewallPluginGEQVersion, at 8da50408): every stderr line (split on
// "\n") that starts with "CNI firewall plugin " has that prefix cut and the
// rest parsed with github.com/Masterminds/semver/v3 NewVersion (the first such
// line decides; a parse error fails the check); the version is then compared
// with GreaterThan || Equal against "v1.1.0" (ingressPolicy) and "v1.7.1"
// (ingressPolicy "isolated"). NewVersion matches the regexp below, anchored
// at both ends (Masterminds semver v3 version.go, semVerRegex), and ordering
// looks at major, minor, patch and the pre-release, never at build metadata.
var nerdctlSemver = regexp.MustCompile(`^v?(0|[1-9]\d*)(?:\.(0|[1-9]\d*))?(?:\.(0|[1-9]\d*))?` +
	`(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?` +
	`(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?$`)

// nerdctlVersion is nerdctl's guessFirewallPluginVersion with the plugin
// name as a parameter: the version triple and pre-release of the first line
// "CNI <name> plugin <semver>" of stderr.
func nerdctlVersion(name, stderr string) (triple [3]uint64, pre string, err error) {
	prefix := "CNI " + name + " plugin "
	for i, l := range strings.Split(stderr, "\n") {
		trimmed := strings.TrimPrefix(l, prefix)
		if trimmed == l {
			continue
		}
		m := nerdctlSemver.FindStringSubmatch(trimmed)
		if m == nil {
			return triple, "", fmt.Errorf("line %d %q: not semver", i+1, trimmed)
		}
		for j := range triple {
			if m[j+1] != "" {
				if triple[j], err = strconv.ParseUint(m[j+1], 10, 64); err != nil {
					return triple, "", err
				}
			}
		}
		return triple, m[4], nil
	}
	return triple, "", fmt.Errorf("stderr %q has no line starting with %q", stderr, prefix)
}

// nerdctlGEQ is nerdctl's ver.GreaterThan(target) || ver.Equal(target) for a
// target without pre-release: a pre-release of the same triple is lower.
func nerdctlGEQ(v [3]uint64, pre string, target [3]uint64) bool {
	for i := range v {
		if v[i] != target[i] {
			return v[i] > target[i]
		}
	}
	return pre == ""
}

// TestNerdctlReadsFirewallVersion: the explanation of a firewall role, read
// the way nerdctl reads it, is a version that has ingressPolicy (>= 1.1.0)
// and its "isolated" policy (>= 1.7.1), for every shape of cnibox's build
// version.
func TestNerdctlReadsFirewallVersion(t *testing.T) {
	add := func(context.Context, *Args, NoConf) (types.Result, error) { return nil, nil }
	firewall := &Role{Name: "firewall", About: "Firewall.", Verbs: &ConfVerbs[NoConf]{Add: add}}
	for _, build := range []string{"", "dev", "v0.4.0", "v0.4.0-12-gabc1234-dirty", "abc1234", "1.2.3+x y"} {
		var out, errOut bytes.Buffer
		Main(context.Background(), firewall, Invocation{Getenv: func(string) string { return "" }, Stdin: strings.NewReader(""), Stderr: &errOut, Version: build}, &out)
		v, pre, err := nerdctlVersion("firewall", errOut.String())
		if err != nil {
			t.Errorf("build %q: nerdctl cannot read %q: %v", build, errOut.String(), err)
			continue
		}
		if v != [3]uint64{1, 9, 1} || pre != "" || !nerdctlGEQ(v, pre, [3]uint64{1, 1, 0}) || !nerdctlGEQ(v, pre, [3]uint64{1, 7, 1}) {
			t.Errorf("build %q: nerdctl reads %v-%q from %q, want 1.9.1 (>= 1.1.0 and >= 1.7.1)", build, v, pre, errOut.String())
		}
	}
	// The parse itself, on nerdctl's own test cases.
	for stderr, want := range map[string]string{
		"CNI firewall plugin v1.1.0\n":                         "[1 1 0]",
		"CNI firewall plugin v0.8.0\n":                         "[0 8 0]",
		"Foo\nCNI firewall plugin v123.456.789+beta.10\nBar\n": "[123 456 789]",
		"CNI firewall plugin version unknown\n":                "error",
		"":                                                     "error",
		"Foo\nBar\nBaz\n":                                      "error",
		"CNI firewall plugin v1.9.1+cnibox.0.4.0-1-gabc\nrest\n": "[1 9 1]",
	} {
		v, _, err := nerdctlVersion("firewall", stderr)
		got := fmt.Sprint(v)
		if err != nil {
			got = "error"
		}
		if got != want {
			t.Errorf("nerdctlVersion(%q) = %s (%v), want %s", stderr, got, err, want)
		}
	}
	if old, _, _ := nerdctlVersion("firewall", "CNI firewall plugin v1.0.1\n"); nerdctlGEQ(old, "", [3]uint64{1, 1, 0}) {
		t.Error("1.0.1 compares as >= 1.1.0")
	}
}
