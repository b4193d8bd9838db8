package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestArm64UnderQemu builds cnibox for linux/arm64 (as an arm64 image
// would hold it) and runs it under Debian's qemu-user-static, called by
// path (no binfmt handler is registered): the CLI prints its version and
// its roles, and every role, called by its name as a runtime calls the
// link, answers CNI VERSION with the spec versions amd64's cnibox answers.
func TestArm64UnderQemu(t *testing.T) {
	if testing.Short() {
		t.Skip("cross-builds cnibox")
	}
	qemu, err := exec.LookPath("qemu-aarch64-static")
	if err != nil {
		t.Skip("qemu-aarch64-static is not installed (Debian's qemu-user-static; make deps)")
	}
	bin := filepath.Join(t.TempDir(), "cnibox")
	build := exec.Command("go", "build", "-trimpath", "-tags", "urfave_cli_no_docs", "-ldflags", "-s -w -X main.version=arm64-test", "-o", bin, "github.com/cnibox/cnibox")
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=arm64")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build for arm64: %v\n%s", err, out)
	}
	if out, err := exec.Command("file", bin).Output(); err == nil && !strings.Contains(string(out), "aarch64") {
		t.Fatalf("not an arm64 binary: %s", out)
	}
	runArm := func(argv0 string, env []string, args ...string) (string, error) {
		cmd := exec.Command(qemu, append([]string{"-0", argv0, bin}, args...)...)
		cmd.Env = append(os.Environ(), env...)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := runArm("cnibox", nil, "version")
	if err != nil || !strings.Contains(out, "cnibox arm64-test") {
		t.Fatalf("cnibox version under qemu: %v\n%s", err, out)
	}
	out, err = runArm("cnibox", nil, "roles")
	roles := strings.Fields(out)
	if err != nil || !slices.Contains(roles, "bridge") || !slices.Contains(roles, "flannel") {
		t.Fatalf("cnibox roles under qemu: %v\n%s", err, out)
	}
	for _, role := range roles {
		out, err := runArm("/opt/cni/bin/"+role, []string{"CNI_COMMAND=VERSION"})
		var v struct {
			SupportedVersions []string `json:"supportedVersions"`
		}
		if err != nil || json.Unmarshal([]byte(out), &v) != nil || !slices.Contains(v.SupportedVersions, "1.0.0") {
			t.Errorf("role %s under qemu: CNI VERSION gave %q (%v)", role, out, err)
		}
	}
	t.Logf("%d roles answer VERSION on arm64", len(roles))
}
