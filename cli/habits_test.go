package cli

import (
	"bytes"
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/cnibox/cnibox/internal/buildinfo"
	"github.com/cnibox/cnibox/roles"
	ucli "github.com/urfave/cli/v2"
)

// runApp runs the CLI with args as a person would, stdout and stderr into
// buffers (not a terminal), and returns them with the exit code.
func runApp(args ...string) (stdout, stderr string, code int) {
	var out, errb bytes.Buffer
	app := newApp(Options{Version: "test", Registry: roles.Registry()})
	app.Writer, app.ErrWriter = &out, &errb
	err := app.Run(append([]string{"cnibox"}, args...))
	if err != nil {
		code = exitFailed
		if ec, ok := err.(ucli.ExitCoder); ok {
			code = ec.ExitCode()
		}
	}
	return out.String(), errb.String(), code
}

// commandPaths are every command of the app with its flags (--help left
// out), "cnibox" for the app itself.
func commandPaths() map[string][]string {
	app := newApp(Options{Version: "test", Registry: roles.Registry()})
	names := func(fs []ucli.Flag) []string {
		var out []string
		for _, f := range fs {
			out = append(out, "--"+f.Names()[0])
		}
		slices.Sort(out)
		return out
	}
	paths := map[string][]string{"cnibox": names(app.Flags)}
	var walk func(path string, cmds []*ucli.Command)
	walk = func(path string, cmds []*ucli.Command) {
		for _, c := range cmds {
			if c.Name == "help" {
				continue
			}
			p := path + " " + c.Name
			paths[p] = names(c.Flags)
			walk(p, c.Subcommands)
		}
	}
	walk("cnibox", app.Commands)
	return paths
}

// TestHelpEndsWithExample: every command's --help, groups and the app's
// included, ends with an example.
func TestHelpEndsWithExample(t *testing.T) {
	for p := range commandPaths() {
		args := append(strings.Fields(p)[1:], "--help")
		out, _, code := runApp(args...)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		tail := ""
		for _, l := range slices.Backward(lines) {
			if strings.HasPrefix(strings.TrimSpace(l), "Example") {
				tail = l
				break
			}
			if !strings.HasPrefix(l, " ") && l != "" { // a section after the example
				break
			}
		}
		if code != 0 || tail == "" {
			t.Errorf("%s --help (exit %d) does not end with an example:\n%s", p, code, out)
		}
	}
}

// TestDocsMatchHelp: docs/cli.md's table of commands and flags names every
// command and flag of --help, and nothing else.
func TestDocsMatchHelp(t *testing.T) {
	b, err := os.ReadFile("../docs/cli.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	start := strings.Index(doc, "\n## Commands and flags\n")
	if start < 0 {
		t.Fatal("docs/cli.md has no section \"## Commands and flags\"")
	}
	doc = doc[start+1:]
	if end := strings.Index(doc[3:], "\n## "); end >= 0 {
		doc = doc[:end+3]
	}
	rowRe := regexp.MustCompile("(?m)^\\| `(cnibox[^`]*)` \\| ([^|]*)\\|")
	flagRe := regexp.MustCompile("`(--[a-z0-9-]+)`")
	documented := map[string][]string{}
	for _, m := range rowRe.FindAllStringSubmatch(doc, -1) {
		var flags []string
		for _, f := range flagRe.FindAllStringSubmatch(m[2], -1) {
			flags = append(flags, f[1])
		}
		slices.Sort(flags)
		documented[m[1]] = flags
	}
	help := commandPaths()
	for p, flags := range help {
		got, ok := documented[p]
		switch {
		case !ok:
			t.Errorf("docs/cli.md: no row for `%s` (flags %v)", p, flags)
		case !slices.Equal(got, flags):
			t.Errorf("docs/cli.md: `%s` lists %v, --help has %v", p, got, flags)
		}
	}
	for p := range documented {
		if _, ok := help[p]; !ok {
			t.Errorf("docs/cli.md: row for `%s`, which is no command", p)
		}
	}
}

// TestUsageErrors: a wrong command line gets one line saying what is wrong
// and a pointer to --help, exit 64, not the whole help.
func TestUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"logs", "--since", "foo"},
		{"--nosuch"},
		{"nosuchcommand"},
		{"inspect", "nosuch"},
		{"exec", "gc", "--netns", "/run/netns/x"}, // a flag of add, not of gc
		{"exec", "add", "--keep", "a/eth0"},       // a flag of gc, not of add
	} {
		out, errs, code := runApp(args...)
		lines := strings.Split(strings.TrimSpace(errs), "\n")
		if code != exitUsage || len(lines) != 2 || !strings.HasPrefix(lines[1], "Run '") || out != "" {
			t.Errorf("cnibox %v: exit %d, stdout %q, stderr:\n%s", args, code, out, errs)
		}
	}
	// A value that does not parse says what the flag takes (urfave's
	// own words are "parse error").
	if _, errs, _ := runApp("logs", "--since", "foo"); !strings.Contains(errs, "want a duration") {
		t.Errorf("cnibox logs --since foo does not say what --since takes:\n%s", errs)
	}
}

// TestVersionAndRoles: --version answers as version does: the release
// (internal/buildinfo's, v0.0.0-dev when the build set none) beside the
// name, then the build and the commit, as kubectl prints a release and a
// commit; both read commands take --json.
func TestVersionAndRoles(t *testing.T) {
	a, _, c1 := runApp("--version")
	b, _, c2 := runApp("version")
	if c1 != 0 || c2 != 0 || a != b || !strings.HasPrefix(a, "cnibox "+buildinfo.DevRelease+"\nbuild: test\ncommit: ") {
		t.Errorf("--version (exit %d) %q, version (exit %d) %q", c1, a, c2, b)
	}
	var v versionInfo
	out, _, code := runApp("version", "--json")
	if err := json.Unmarshal([]byte(out), &v); err != nil || code != 0 || v.Release != buildinfo.DevRelease || v.Build != "test" || len(v.SpecVersions) == 0 {
		t.Errorf("version --json (exit %d, %v): %s", code, err, out)
	}
	// The release the build set.
	defer func(r, c string) { buildinfo.Release, buildinfo.Commit = r, c }(buildinfo.Release, buildinfo.Commit)
	buildinfo.Release, buildinfo.Commit = "v0.2.0", "03de98e0123-dirty"
	var b2 bytes.Buffer
	app := newApp(Options{Version: "03de98e-dirty", Registry: roles.Registry()})
	app.Writer = &b2
	if err := app.Run([]string{"cnibox", "--version"}); err != nil ||
		!strings.HasPrefix(b2.String(), "cnibox v0.2.0\nbuild: 03de98e-dirty\ncommit: 03de98e0123 (with changes not committed)\n") {
		t.Errorf("--version with a release (%v): %q", err, b2.String())
	}
	var roles []string
	out, _, code = runApp("roles", "--json")
	if err := json.Unmarshal([]byte(out), &roles); err != nil || code != 0 {
		t.Errorf("roles --json (exit %d, %v): %s", code, err, out)
	}
}

// TestNoEscapeCodes: nothing cnibox prints into a pipe holds a terminal
// escape code (so NO_COLOR holds trivially): every --help and the usage
// errors.
func TestNoEscapeCodes(t *testing.T) {
	for p := range commandPaths() {
		out, errs, _ := runApp(append(strings.Fields(p)[1:], "--help")...)
		if strings.Contains(out+errs, "\x1b") {
			t.Errorf("%s --help holds an escape code: %q", p, out+errs)
		}
	}
	if out, errs, _ := runApp("logs", "--since", "foo"); strings.Contains(out+errs, "\x1b") {
		t.Errorf("a usage error holds an escape code: %q", out+errs)
	}
}

// TestReadCommandsTakeJSON: every command that reads and reports takes
// --json; only those that change the node or run plugins (install, exec's
// verbs), print a script (completion) or group others do not.
func TestReadCommandsTakeJSON(t *testing.T) {
	notRead := []string{"cnibox", "cnibox completion", "cnibox install", "cnibox exec", "cnibox exec add",
		"cnibox exec check", "cnibox exec del", "cnibox exec gc", "cnibox exec status", "cnibox inspect",
		"cnibox overlay", "cnibox store", "cnibox cleanup"}
	for p, flags := range commandPaths() {
		if !slices.Contains(notRead, p) && !slices.Contains(flags, "--json") {
			t.Errorf("%s reads the node but takes no --json (flags %v)", p, flags)
		}
	}
}

// TestAgentAbsentExits1: every view of cnibox-agent's exits 1 with one
// line naming what is missing when the agent (or its feature) is absent on
// the node: inspect policy, inspect cluster-ipam, overlay peers and status.
func TestAgentAbsentExits1(t *testing.T) {
	empty := t.TempDir()
	for _, args := range [][]string{
		{"inspect", "policy", "--data-dir", empty},
		{"inspect", "cluster-ipam", "--agent-socket", empty + "/agent.sock"},
		{"overlay", "peers", "--data-dir", empty},
		{"overlay", "status", "--data-dir", empty},
	} {
		for _, js := range []bool{false, true} {
			a := args
			if js {
				a = append(slices.Clone(args), "--json")
			}
			code, out := runCLI(t, a...)
			if code != 1 || strings.Count(strings.TrimSpace(out), "\n") != 0 || !strings.Contains(out, "agent") {
				t.Errorf("cnibox %v: exit %d, want 1 and one line naming the agent:\n%s", a, code, out)
			}
		}
	}
}
