// Package binaries finds the cnibox binaries a test drives: the ones make
// built ($CNIBOX_BIN and an agent beside it), or fresh builds of this tree.
package binaries

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// CniboxAndAgent returns cnibox and an agent: $CNIBOX_BIN and the file
// agentName beside it (cnibox-agent, or cnibox-agent-kube for the
// Kubernetes client) when both exist, else both built into a temp dir.
func CniboxAndAgent(t *testing.T, agentName string) (cnibox, agent string) {
	t.Helper()
	if p := os.Getenv("CNIBOX_BIN"); p != "" {
		a := filepath.Join(filepath.Dir(p), agentName)
		if _, err := os.Stat(a); err == nil {
			return p, a
		}
	}
	dir := t.TempDir()
	for _, b := range []struct{ out, pkg string }{
		{"cnibox", "github.com/cnibox/cnibox"},
		{"cnibox-agent", "github.com/cnibox/cnibox/cmd/cnibox-agent"},
	} {
		cmd := exec.Command("go", "build", "-o", filepath.Join(dir, b.out), b.pkg)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("build %s: %v\n%s", b.pkg, err, out)
		}
	}
	return filepath.Join(dir, "cnibox"), filepath.Join(dir, "cnibox-agent")
}
