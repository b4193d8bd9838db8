package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// qemuUser is Debian's qemu-user-static emulator of each Go architecture.
var qemuUser = map[string]string{
	"arm64":   "qemu-aarch64-static",
	"arm":     "qemu-arm-static",
	"ppc64le": "qemu-ppc64le-static",
	"s390x":   "qemu-s390x-static",
	"riscv64": "qemu-riscv64-static",
	"amd64":   "qemu-x86_64-static",
}

// TestArm64UnderQemu runs the binaries of the image index's foreign
// platforms from their own layers under Debian's qemu-user-static, called
// by path (no binfmt handler is registered): the image's arm64 image, and
// every other platform of make image's archive ($CNIBOX_IMAGE_TAR) whose
// emulator is installed. In each, the CLI prints its version and its
// roles, every role, called by its name as a runtime calls the link,
// answers CNI VERSION with the spec versions amd64's cnibox answers,
// /flannel is that role, both agents print their version, the dhcp daemon
// its usage, and busybox's sh runs. Without $CNIBOX_IMAGE_TAR the test
// builds cnibox for arm64 and an index of it alone.
func TestArm64UnderQemu(t *testing.T) {
	if testing.Short() {
		t.Skip("cross-builds cnibox or reads make image's archive")
	}
	if _, err := exec.LookPath(qemuUser["arm64"]); err != nil {
		t.Skip("qemu-aarch64-static is not installed (Debian's qemu-user-static; make deps)")
	}
	archive := os.Getenv("CNIBOX_IMAGE_TAR")
	if archive == "" {
		archive = arm64Archive(t)
	}
	data, err := os.ReadFile(archive)
	if err != nil {
		t.Fatal(err)
	}
	files := archiveFiles(t, data)
	w := archiveWritten(t, archive)
	arm64 := false
	for _, md := range w.Manifests {
		arch := md.Platform.Architecture
		if arch == runtime.GOARCH {
			continue
		}
		arm64 = arm64 || arch == "arm64"
		p := path.Join(md.Platform.OS, arch, md.Platform.Variant)
		qemu, err := exec.LookPath(qemuUser[arch])
		if err != nil {
			t.Logf("%s: no %s installed, not run", p, qemuUser[arch])
			continue
		}
		t.Run(strings.ReplaceAll(p, "/", "-"), func(t *testing.T) {
			var man ocispec.Manifest
			if err := json.Unmarshal(blobOf(t, files, md), &man); err != nil || len(man.Layers) != 1 {
				t.Fatalf("%s's manifest: %v %+v", p, err, man)
			}
			root := extractLayer(t, layerFiles(t, blobOf(t, files, man.Layers[0])))
			runUnderQemu(t, qemu, root)
		})
	}
	if !arm64 {
		t.Errorf("%s has no linux/arm64 image", archive)
	}
}

// arm64Archive builds cnibox for linux/arm64 and an archive of an index
// holding that one platform's image.
func arm64Archive(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "linux-arm64", "cnibox")
	build := exec.Command("go", "build", "-trimpath", "-tags", "urfave_cli_no_docs", "-ldflags", "-s -w -X main.version=arm64-test", "-o", bin, "github.com/cnibox/cnibox")
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=arm64")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build for arm64: %v\n%s", err, out)
	}
	archive := filepath.Join(dir, "image.tar")
	if _, err := runTool(t, "-o", archive, "-ref", "ghcr.io/cnibox/cnibox:v5", "-epoch", "1700000000", "-platform", "linux/arm64="+filepath.Dir(bin)); err != nil {
		t.Fatal(err)
	}
	return archive
}

// archiveFiles is the archive's files by name (tarFiles').
func archiveFiles(t *testing.T, data []byte) map[string][]byte {
	t.Helper()
	return tarFiles(t, bytes.NewReader(data))
}

// extractLayer writes the layer's regular files (hard links as copies)
// into a new directory and returns it.
func extractLayer(t *testing.T, files map[string][]byte) string {
	t.Helper()
	root := t.TempDir()
	for name, data := range files {
		if bytes.HasPrefix(data, []byte("-> ")) {
			continue // a symlink: busybox's applets, flanneld
		}
		p := filepath.Join(root, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, data, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// runUnderQemu runs the image's binaries under root with qemu.
func runUnderQemu(t *testing.T, qemu, root string) {
	start := time.Now()
	run := func(bin, argv0 string, env []string, args ...string) (string, error) {
		cmd := exec.Command(qemu, append([]string{"-0", argv0, filepath.Join(root, bin)}, args...)...)
		cmd.Env = append(os.Environ(), env...)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	cnibox := "usr/local/bin/cnibox"
	out, err := run(cnibox, "cnibox", nil, "version")
	if err != nil || !strings.HasPrefix(out, "cnibox ") {
		t.Fatalf("cnibox version under qemu: %v\n%s", err, out)
	}
	out, err = run(cnibox, "cnibox", nil, "roles")
	roles := strings.Fields(out)
	if err != nil || !slices.Contains(roles, "bridge") || !slices.Contains(roles, "flannel") {
		t.Fatalf("cnibox roles under qemu: %v\n%s", err, out)
	}
	for _, role := range roles {
		out, err := run(cnibox, "/opt/cni/bin/"+role, []string{"CNI_COMMAND=VERSION"})
		var v struct {
			SupportedVersions []string `json:"supportedVersions"`
		}
		if err != nil || json.Unmarshal([]byte(out), &v) != nil || !slices.Contains(v.SupportedVersions, "1.0.0") {
			t.Errorf("role %s under qemu: CNI VERSION gave %q (%v)", role, out, err)
		}
	}
	exists := func(p string) bool { _, err := os.Stat(filepath.Join(root, p)); return err == nil }
	if exists("flannel") {
		if out, err := run("flannel", "/opt/cni/bin/flannel", nil, "version"); err != nil || !strings.HasPrefix(out, "CNI flannel plugin ") {
			t.Errorf("/flannel version under qemu: %v %q", err, out)
		}
	}
	for _, agent := range []string{"cnibox-agent", "cnibox-agent-kube"} {
		if p := "usr/local/bin/" + agent; exists(p) {
			if out, err := run(p, agent, nil, "--version"); err != nil || !strings.HasPrefix(out, "cnibox-agent ") {
				t.Errorf("%s --version under qemu: %v %q", agent, err, out)
			}
		}
	}
	if p := "usr/local/bin/cnibox-dhcp"; exists(p) {
		if out, _ := run(p, "cnibox-dhcp", nil, "-h"); !strings.Contains(out, "-socketpath") {
			t.Errorf("cnibox-dhcp -h under qemu: %q, want its usage", out)
		}
	}
	if exists("bin/busybox") {
		if out, err := run("bin/busybox", "sh", nil, "-c", "echo $((6*7))"); err != nil || strings.TrimSpace(out) != "42" {
			t.Errorf("busybox sh under qemu: %v %q", err, out)
		}
	}
	t.Logf("%s: %d roles answer VERSION, the agents, dhcp and busybox run (%v)", filepath.Base(qemu), len(roles), time.Since(start).Round(time.Millisecond))
}
