package e2e

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// nerdctlSemver is the regexp github.com/Masterminds/semver/v3 NewVersion
// matches (version.go, semVerRegex, anchored), which nerdctl uses to read a
// plugin's version line (see versionOf).
var nerdctlSemver = regexp.MustCompile(`^v?(0|[1-9]\d*)(?:\.(0|[1-9]\d*))?(?:\.(0|[1-9]\d*))?` +
	`(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?` +
	`(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?$`)

// versionOf reads stderr as containerd/nerdctl pkg/netutil/netutil_unix.go
// (guessFirewallPluginVersion, at 8da50408) reads the firewall's, with the
// plugin name as a parameter: the first line starting with "CNI <name>
// plugin " has that prefix cut and the rest parsed as semver. It returns
// the triple and the pre-release (build metadata does not order), ok false
// when nerdctl would fail.
func versionOf(name, stderr string) (v [3]uint64, pre string, ok bool) {
	prefix := "CNI " + name + " plugin "
	for _, l := range strings.Split(stderr, "\n") {
		trimmed := strings.TrimPrefix(l, prefix)
		if trimmed == l {
			continue
		}
		m := nerdctlSemver.FindStringSubmatch(trimmed)
		if m == nil {
			return v, "", false
		}
		for i := range v {
			if m[i+1] != "" {
				n, err := strconv.ParseUint(m[i+1], 10, 64)
				if err != nil {
					return v, "", false
				}
				v[i] = n
			}
		}
		return v, m[4], true
	}
	return v, "", false
}

// atLeast is Masterminds' GreaterThan || Equal against a release target.
func atLeast(v [3]uint64, pre string, target [3]uint64) bool {
	for i := range v {
		if v[i] != target[i] {
			return v[i] > target[i]
		}
	}
	return pre == ""
}

// runBare runs path with no arguments, nothing on stdin and env as its whole
// environment, as a person or a client probing the plugin does.
func runBare(t *testing.T, path string, env []string) (code int, stdout, stderr string) {
	t.Helper()
	cmd := exec.Command(path)
	cmd.Env = env
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	if ee, isExit := err.(*exec.ExitError); isExit {
		return ee.ExitCode(), o.String(), e.String()
	} else if err != nil {
		t.Fatalf("run %s: %v", path, err)
	}
	return 0, o.String(), e.String()
}

// TestVersionLine: every role, run through its symlink without CNI_COMMAND,
// prints "CNI <type> plugin v<semver>" as its first stderr line (a version
// nerdctl reads and finds >= 1.1.0, the firewall's ingressPolicy), then its
// explanation, and nothing on stdout, and exits 0: nerdctl runs the plugin
// with exec.Cmd.Run, its environment inherited (as runBare with nil does),
// and reads no version when the exit is not 0. bridge with an empty
// environment does the same.
func TestVersionLine(t *testing.T) {
	bin := cniboxBin(t)
	out, err := exec.Command(bin, "roles").Output()
	if err != nil {
		t.Fatalf("cnibox roles: %v", err)
	}
	names := roleNames(string(out))
	if len(names) < 10 {
		t.Fatalf("cnibox roles listed %v", names)
	}
	dir := t.TempDir()
	for _, name := range names {
		link := filepath.Join(dir, name)
		if err := os.Symlink(bin, link); err != nil {
			t.Fatal(err)
		}
		code, stdout, stderr := runBare(t, link, nil)
		first, rest, _ := strings.Cut(stderr, "\n")
		v, pre, ok := versionOf(name, stderr)
		if !strings.HasPrefix(first, "CNI "+name+" plugin v") || !ok || !atLeast(v, pre, [3]uint64{1, 1, 0}) {
			t.Errorf("%s: first stderr line %q: want CNI %s plugin v<semver >= 1.1.0> read as nerdctl reads it (got %v %q ok=%v)", name, first, name, v, pre, ok)
		}
		if code != 0 || stdout != "" || !strings.Contains(rest, "cnibox --help") {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want exit 0, the explanation after the line, nothing on stdout", name, code, stdout, stderr)
		}
	}
	// The reference's own form, for comparison (Debian's build says
	// "version unknown", a release build "v1.9.1").
	if _, err := os.Stat("/usr/lib/cni/bridge"); err == nil {
		code, _, ref := runBare(t, "/usr/lib/cni/bridge", []string{})
		if code != 0 || !strings.HasPrefix(ref, "CNI bridge plugin ") {
			t.Errorf("reference bridge exits %d saying %q: the form compared against changed", code, ref)
		}
	}
	// bridge with an empty environment.
	code, stdout, stderr := runBare(t, filepath.Join(dir, "bridge"), []string{})
	first, _, _ := strings.Cut(stderr, "\n")
	if code != 0 || stdout != "" || !strings.HasPrefix(first, "CNI bridge plugin v1.9.1") {
		t.Errorf("bridge, empty environment: exit %d, stdout %q, first stderr line %q", code, stdout, first)
	}
}

var roleName = regexp.MustCompile(`^[a-z][a-z0-9-]*$`)

// roleNames are the first words of `cnibox roles`' rows that are role names.
func roleNames(out string) []string {
	var names []string
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) > 0 && roleName.MatchString(f[0]) {
			names = append(names, f[0])
		}
	}
	return names
}
