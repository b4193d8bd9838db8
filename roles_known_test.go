package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestToolsImportNoRole keeps role knowledge in the roles: nodestate (gc,
// store rebuild, doctor's leftovers) and cli import no role package, in
// their code or their tests, and ask the registry's declarations
// (cniplug.Known) instead. A tool that imports a role learns its names and
// layouts by hand, so the next role with its own veth prefix, device or
// records is missed by gc and doctor until someone adds it in several
// places; a new role must stay one folder and a line in roles/registry.go.
// (Tests may use the registry itself, package roles.)
func TestToolsImportNoRole(t *testing.T) {
	const roles = "github.com/cnibox/cnibox/roles"
	for _, pkg := range []string{"./nodestate", "./cli"} {
		out, err := exec.Command("go", "list", "-deps", pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps %s: %v\n%s", pkg, err, out)
		}
		for _, dep := range strings.Fields(string(out)) {
			if dep == roles || strings.HasPrefix(dep, roles+"/") {
				t.Errorf("%s links %s: ask the registry's declarations (cniplug.Known), passed in from main, instead", pkg, dep)
			}
		}
		out, err = exec.Command("go", "list", "-f", `{{join .TestImports "\n"}}{{"\n"}}{{join .XTestImports "\n"}}`, pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list -f TestImports %s: %v\n%s", pkg, err, out)
		}
		for _, imp := range strings.Fields(string(out)) {
			if strings.HasPrefix(imp, roles+"/") {
				t.Errorf("a test of %s imports %s: take the registry (roles.Registry()) and ask its declarations", pkg, imp)
			}
		}
	}
}
