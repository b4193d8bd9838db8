package cli

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/cnibox/cnibox/roles"
)

// docFieldsOf is a row that takes in another page's fields: "every field
// of [bridge](bridge.md)" (azure-vnet's bridge mode runs bridge's parser).
var docFieldsOf = regexp.MustCompile(`every field of \[[^]]*\]\(([a-z-]+)\.md`)

// docFieldName is a field's name in a table cell: `name`, `ipam.name`,
// `name.sub` (a field of a section), `etcd_*` (every field that starts so).
var docFieldName = regexp.MustCompile("`([A-Za-z0-9_./*-]+)`")

// docFields returns the fields the field tables of a docs/roles page list:
// the names in the first column of every table whose header's first cell
// starts with "field" ("field (in `ipam`)" too), and those of the page a
// row names as "every field of [page](page.md)". Of a dotted name only the
// field of the config counts (`ipam.addresses` of an IPAM role: addresses;
// `kubernetes.kubeconfig`: kubernetes); a name ending in * is a prefix.
func docFields(t *testing.T, page string, ipam bool) (names map[string]bool, prefixes []string) {
	t.Helper()
	b, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	names = map[string]bool{}
	in := false
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		cells := strings.Split(line, "|")
		switch {
		case !strings.HasPrefix(line, "|") || len(cells) < 3:
			in = false
		case strings.HasPrefix(strings.ToLower(strings.TrimSpace(cells[1])), "field"):
			in = true
		case in && docFieldsOf.MatchString(cells[1]):
			n, p := docFields(t, filepath.Join(filepath.Dir(page), docFieldsOf.FindStringSubmatch(cells[1])[1]+".md"), ipam)
			for f := range n {
				names[f] = true
			}
			prefixes = append(prefixes, p...)
		case in:
			for _, m := range docFieldName.FindAllStringSubmatch(cells[1], -1) {
				name := m[1]
				if ipam {
					name = strings.TrimPrefix(name, "ipam.")
				}
				name, _, _ = strings.Cut(name, ".")
				if p, ok := strings.CutSuffix(name, "*"); ok {
					prefixes = append(prefixes, p)
				} else {
					names[name] = true
				}
			}
		}
	}
	return names, prefixes
}

// TestKnownFieldsAreDocumented: the fields `cnibox check` knows for each
// role (the top level of its Known.Config structs) are exactly those of the
// field tables of its page under docs/roles. A field a role decodes that
// its page does not list fails, and so does a listed field check would warn
// about. The fields every config may hold (commonFields: cniVersion, name,
// type, capabilities, ipam, dns, runtimeConfig, args, prevResult, GC's) are
// documented once, in docs/cli.md's check section, so a page may list
// them or not. A page may take in another's fields with a row "every field
// of [bridge](bridge.md)" (azure-vnet's bridge mode).
func TestKnownFieldsAreDocumented(t *testing.T) {
	common := commonFields()
	reg := roles.Registry()
	for _, name := range reg.Names() {
		if r, _ := reg.Lookup(name); r.Known == nil || len(r.Known.Config) == 0 {
			t.Errorf("role %s declares no Known.Config: cnibox check cannot catch a typo in its config", name)
		}
	}
	for _, k := range reg.Known() {
		tree := knownTree(k.Known)
		if tree == nil || len(*tree) == 0 {
			continue // nothing but the common fields (passthru)
		}
		r, _ := reg.Lookup(k.Role)
		doc := k.Doc
		if doc == "" {
			doc = k.Role
		}
		page := filepath.Join("..", "docs", "roles", doc+".md")
		listed, prefixes := docFields(t, page, r.IPAM)
		prefixed := func(f string) bool {
			return slices.ContainsFunc(prefixes, func(p string) bool { return strings.HasPrefix(f, p) })
		}
		var undocumented, unknown []string
		for _, f := range tree.names() {
			if !listed[f] && !prefixed(f) && !slices.Contains(common, f) {
				undocumented = append(undocumented, f)
			}
		}
		for f := range listed {
			if _, ok := (*tree)[f]; !ok && !slices.Contains(common, f) {
				unknown = append(unknown, f)
			}
		}
		sort.Strings(unknown)
		if len(undocumented) > 0 {
			t.Errorf("%s: role %s decodes %v, which the page's field table does not list", page, k.Role, undocumented)
		}
		if len(unknown) > 0 {
			t.Errorf("%s: the field table lists %v, which role %s does not decode (cnibox check warns about them)", page, unknown, k.Role)
		}
	}
}
