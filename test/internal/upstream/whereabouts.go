package upstream

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// WhereaboutsVersion is the whereabouts release the side-by-side tests and
// benches run next to cnibox's whereabouts role.
const WhereaboutsVersion = "v0.9.4"

// Whereabouts returns whereabouts' own CNI binary (WhereaboutsVersion),
// building it the first time from the Go module proxy into the user's cache.
// `go install ...@version` refuses its module (its go.mod has a replace), so
// it is built in a throwaway module that repeats that replace.
func Whereabouts() (string, error) {
	dir, err := cacheDir("whereabouts-" + WhereaboutsVersion)
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "whereabouts")
	if isFile(bin) {
		return bin, nil
	}
	tmp, err := os.MkdirTemp(dir, ".build-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	gomod := "module wbbuild\n\ngo 1.24\n\nrequire github.com/k8snetworkplumbingwg/whereabouts " + WhereaboutsVersion +
		"\n\nreplace github.com/gogo/protobuf => github.com/gogo/protobuf v1.3.2\n"
	if err := os.WriteFile(filepath.Join(tmp, "go.mod"), []byte(gomod), 0o644); err != nil {
		return "", err
	}
	fmt.Fprintf(os.Stderr, "upstream: building whereabouts %s into %s (once, a few minutes)\n", WhereaboutsVersion, dir)
	pkg := "github.com/k8snetworkplumbingwg/whereabouts/cmd"
	for _, args := range [][]string{
		{"get", pkg + "@" + WhereaboutsVersion},
		{"build", "-o", bin + ".tmp", pkg},
	} {
		cmd := exec.Command("go", args...)
		cmd.Dir = tmp
		cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod -trimpath", "CGO_ENABLED=0", "GOWORK=off")
		if out, err := cmd.CombinedOutput(); err != nil {
			return "", fmt.Errorf("go %v for whereabouts %s (it needs the Go module proxy): %w\n%s", args[0], WhereaboutsVersion, err, out)
		}
	}
	if err := os.Rename(bin+".tmp", bin); err != nil {
		return "", err
	}
	return bin, nil
}
