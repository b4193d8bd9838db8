package main

import (
	"bytes"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// startRegistry runs Debian's docker-registry (distribution 2.8) on a free
// loopback port with its storage in a temporary directory until the test
// ends, and returns its host:port.
func startRegistry(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("docker-registry")
	if err != nil {
		t.Skip("docker-registry is not installed (make deps installs Debian's)")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	dir := t.TempDir()
	conf := fmt.Sprintf("version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: %s\nhttp:\n  addr: %s\n", filepath.Join(dir, "data"), addr)
	if err := os.WriteFile(filepath.Join(dir, "config.yml"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	cmd := exec.Command(bin, "serve", filepath.Join(dir, "config.yml"))
	cmd.Stdout, cmd.Stderr = &log, &log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
		if t.Failed() {
			t.Logf("docker-registry log:\n%s", log.String())
		}
	})
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if resp, err := http.Get("http://" + addr + "/v2/"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return addr
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("docker-registry did not answer on %s within 15 s:\n%s", addr, log.String())
		}
	}
}

// TestPushRegistryContainerd: image push to a real registry process
// (Debian's docker-registry on loopback), then containerd pulls the tag
// (ctr images pull, every platform): containerd names the image by the
// index's digest, and holds both architectures' manifests by the digests
// the archives gave them; a pull of one platform by the manifest's digest
// (the reference the rendered manifests use) works too.
func TestPushRegistryContainerd(t *testing.T) {
	if testing.Short() {
		t.Skip("runs docker-registry and containerd")
	}
	for _, tool := range []string{"containerd", "ctr"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not installed (make deps)", tool)
		}
	}
	if os.Geteuid() != 0 {
		t.Skip("containerd runs as root")
	}
	host := startRegistry(t)
	dir := t.TempDir()
	amd, amdDigest := writeArchiveFor(t, dir, "ghcr.io/cnibox/cnibox:v1", "amd64")
	arm, armDigest := writeArchiveFor(t, dir, "ghcr.io/cnibox/cnibox:v1", "arm64")
	ref := host + "/cnibox/cnibox:v1"
	var out, errOut bytes.Buffer
	if err := run([]string{"push", "-ref", ref, amd, arm}, &out, &errOut); err != nil {
		t.Fatalf("image push: %v\n%s", err, errOut.String())
	}
	t.Log(strings.TrimSpace(out.String()))
	_, index, ok := strings.Cut(strings.TrimSpace(out.String()), "@")
	if !ok {
		t.Fatalf("image push printed no index digest: %q", out.String())
	}

	c := startContainerd(t)
	c.mustRun("images", "pull", "--plain-http", "--all-platforms", ref)
	if ls := c.mustRun("images", "ls"); !strings.Contains(ls, ref) || !strings.Contains(ls, index) {
		t.Errorf("ctr images ls after the pull: want %s at %s:\n%s", ref, index, ls)
	}
	content := c.mustRun("content", "ls", "-q")
	for arch, d := range map[string]string{"amd64": amdDigest.String(), "arm64": armDigest.String()} {
		if !strings.Contains(content, d) {
			t.Errorf("containerd lacks the %s image manifest %s:\n%s", arch, d, content)
		}
	}
	byDigest := host + "/cnibox/cnibox@" + amdDigest.String()
	c.mustRun("images", "pull", "--plain-http", "--platform", "linux/amd64", byDigest)
	if ls := c.mustRun("images", "ls", "-q"); !strings.Contains(ls, byDigest) {
		t.Errorf("pulled by the manifest's digest, containerd lists:\n%s", ls)
	}
}
