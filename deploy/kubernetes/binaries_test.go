package kubernetes

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// TestMain removes the binaries madeBinary built.
func TestMain(m *testing.M) {
	code := m.Run()
	if builds.dir != "" {
		os.RemoveAll(builds.dir)
	}
	os.Exit(code)
}

// builds are the binaries madeBinary built in this process, by name.
var builds struct {
	mu   sync.Mutex
	dir  string
	done map[string]error
}

// madeBinary returns the binary make build writes as bin/name from the
// package pkg: the one beside $CNIBOX_BIN (make test builds them all
// before the tests), else this tree's build, made once per process with
// make build's flags (so that it reuses make build's compiled packages).
func madeBinary(t *testing.T, name, pkg string) string {
	t.Helper()
	if p := os.Getenv("CNIBOX_BIN"); p != "" {
		b := filepath.Join(filepath.Dir(p), name)
		if _, err := os.Stat(b); err == nil {
			return b
		}
	}
	builds.mu.Lock()
	defer builds.mu.Unlock()
	if builds.dir == "" {
		dir, err := os.MkdirTemp("", "cnibox-manifest-bin-")
		if err != nil {
			t.Fatal(err)
		}
		builds.dir, builds.done = dir, map[string]error{}
	}
	out := filepath.Join(builds.dir, name)
	err, built := builds.done[name]
	if !built {
		cmd := exec.Command("go", "build", "-trimpath", "-o", out, "github.com/cnibox/cnibox/"+pkg)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if msg, e := cmd.CombinedOutput(); e != nil {
			err = fmt.Errorf("build %s: %v\n%s", pkg, e, msg)
		}
		builds.done[name] = err
	}
	if err != nil {
		t.Fatal(err)
	}
	return out
}
