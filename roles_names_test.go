package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/roles"
)

// toolDirs are the packages that must name no role: they ask the roles'
// declarations (cniplug.Known) for what is a role's.
var toolDirs = []string{"store", "nodestate", "cli"}

// genericWords are role names that are also the name of a thing no role
// owns; the code of the tools may say them:
//   - bridge: the kernel's bridge link kind, which `cnibox topology` draws
//     and doctor checks for any endpoint whose host end is a bridge port
//     (store.Endpoint.Bridge), whichever role made it;
//   - vxlan: the kernel's VXLAN link kind, that of the overlay device
//     cnibox-agent keeps (cnibox overlay, topology), not the vxlan role.
var genericWords = []string{"bridge", "vxlan"}

// TestToolsNameNoRole extends TestToolsImportNoRole from imports to names:
// the non-test code of store, nodestate and cli names no role and no kind
// of record a role keeps, so that a new role (or a role's new record) is
// one folder and a line in roles/registry.go, found by gc, doctor,
// inspect and store check through its declarations (cniplug.Known). A tool
// that names a role knows it by hand, and is wrong the day the role
// changes what it keeps.
//
// The rule, for every non-test .go file of toolDirs:
//   - the words are every role's name and package (roles/<pkg>) and every
//     kind of leftover and store bucket the roles declare
//     (cniplug.Leftovers), lower case, without '-' (host-local: hostlocal),
//     and each with an 's' (portmaps); genericWords are left out;
//   - an identifier fails when a run of its camel-case words, joined,
//     is a word (PortMapRecord: port+map; dhcpDaemon: dhcp);
//   - a string literal that is one token (no white space) fails when a run
//     of its alphanumeric parts, joined, is a word ("cnibox-dhcp",
//     "host-local", "portmap-elements"). Text with white space is prose
//     for a person (help, messages, fixes), which may name a role as an
//     example; struct tags and import paths are not checked (tags are the
//     JSON names of outputs kept as they are);
//   - comments are not checked.
func TestToolsNameNoRole(t *testing.T) {
	words := roleWords(t, roles.Registry())
	for _, dir := range toolDirs {
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, path := range files {
			if strings.HasSuffix(path, "_test.go") {
				continue
			}
			for _, hit := range namesIn(t, path, words) {
				t.Errorf("%s names %s: ask the roles' declarations (cniplug.Known) instead", hit.pos, hit.what)
			}
		}
	}
}

// TestToolsNameNoRoleFinds: the rule finds what it must and leaves prose.
func TestToolsNameNoRoleFinds(t *testing.T) {
	words := map[string]bool{"dhcp": true, "portmap": true, "portmaps": true, "hostlocal": true, "ifb": true}
	src := `package p
type PortMapRecord struct{ Ifb string ` + "`json:\"ifb\"`" + ` }
const dhcpDaemonBinary = "cnibox-dhcp"
var a = "host-local"
var b = "the dhcp daemon's leases"
var c = "portmap-elements"
func f(x PortMapRecord) {}
`
	dir := t.TempDir()
	path := filepath.Join(dir, "p.go")
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, h := range namesIn(t, path, words) {
		got = append(got, h.what)
	}
	want := []string{`type PortMapRecord`, `field Ifb`, `const dhcpDaemonBinary`, `string "cnibox-dhcp"`,
		`string "host-local"`, `string "portmap-elements"`, `type PortMapRecord`}
	if !slices.Equal(got, want) {
		t.Errorf("found %q\nwant  %q", got, want)
	}
}

// roleWords are the words of the rule (see TestToolsNameNoRole).
func roleWords(t *testing.T, reg *cniplug.Registry) map[string]bool {
	words := map[string]bool{}
	add := func(s string) {
		w := strings.ToLower(strings.NewReplacer("-", "", "_", "", ".", "").Replace(s))
		if w == "" || slices.Contains(genericWords, w) {
			return
		}
		words[w] = true
		words[w+"s"] = true
	}
	for _, n := range reg.Names() {
		add(n)
	}
	dirs, err := os.ReadDir("roles")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range dirs {
		if d.IsDir() && d.Name() != "internal" {
			add(d.Name())
		}
	}
	for _, w := range declaredKinds(reg) {
		add(w)
	}
	return words
}

// hit is one name the rule found.
type hit struct {
	pos  token.Position
	what string
}

// namesIn parses a file and returns the identifiers and one-token strings
// that name a word (see TestToolsNameNoRole).
func namesIn(t *testing.T, path string, words map[string]bool) []hit {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	skip := map[*ast.BasicLit]bool{}
	for _, imp := range f.Imports {
		skip[imp.Path] = true
	}
	var out []hit
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.Field:
			if n.Tag != nil {
				skip[n.Tag] = true
			}
		case *ast.Ident:
			if namesWord(camelWords(n.Name), words) {
				out = append(out, hit{fset.Position(n.Pos()), identKind(n) + n.Name})
			}
		case *ast.BasicLit:
			if n.Kind != token.STRING || skip[n] {
				return true
			}
			s, err := strconv.Unquote(n.Value)
			if err != nil || strings.ContainsFunc(strings.TrimSpace(s), unicode.IsSpace) {
				return true
			}
			parts := strings.FieldsFunc(strings.ToLower(s), func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) })
			if namesWord(parts, words) {
				out = append(out, hit{fset.Position(n.Pos()), "string " + n.Value})
			}
		}
		return true
	})
	return out
}

// identKind says what an identifier declares, for messages ("" for a use).
func identKind(id *ast.Ident) string {
	if id.Obj == nil {
		return ""
	}
	switch id.Obj.Kind {
	case ast.Typ:
		return "type "
	case ast.Con:
		return "const "
	case ast.Fun:
		return "func "
	case ast.Var:
		if _, ok := id.Obj.Decl.(*ast.Field); ok {
			return "field "
		}
		return "var "
	}
	return ""
}

// namesWord reports whether a run of parts, joined, is one of words.
func namesWord(parts []string, words map[string]bool) bool {
	for i := range parts {
		w := ""
		for j := i; j < len(parts); j++ {
			w += parts[j]
			if words[w] {
				return true
			}
		}
	}
	return false
}

// camelWords splits an identifier into its lower-case words:
// "PortMapRecord" -> port, map, record; "DHCPLease" -> dhcp, lease.
func camelWords(id string) []string {
	var out []string
	rs := []rune(id)
	start := 0
	for i := 1; i <= len(rs); i++ {
		split := i == len(rs) || rs[i] == '_' ||
			(unicode.IsUpper(rs[i]) && (unicode.IsLower(rs[i-1]) || unicode.IsDigit(rs[i-1]) ||
				(i+1 < len(rs) && unicode.IsLower(rs[i+1]) && unicode.IsUpper(rs[i-1]))))
		if !split {
			continue
		}
		if w := strings.Trim(string(rs[start:i]), "_"); w != "" {
			out = append(out, strings.ToLower(w))
		}
		start = i
	}
	return out
}

// declaredKinds are the words the roles' declarations add: their kinds of
// leftovers and record, their records' buckets, their inspect commands and
// their companion binaries.
func declaredKinds(reg *cniplug.Registry) []string {
	var out []string
	for _, l := range reg.Leftovers() {
		out = append(out, l.Kinds...)
		for _, k := range l.Records {
			out = append(out, k.Kind, k.Bucket)
		}
	}
	for _, ic := range reg.InspectCommands() {
		out = append(out, ic.Name)
	}
	return append(out, reg.Companions()...)
}
