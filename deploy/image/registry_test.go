package main

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/cnibox/cnibox/internal/testenv"
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

// archiveWritten reads what WriteArchive wrote into archive (make
// image's): the index the layout names and its image manifests.
func archiveWritten(t *testing.T, archive string) Written {
	t.Helper()
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	files := map[string][]byte{}
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Name == "index.json" || strings.HasPrefix(h.Name, "blobs/") && h.Size < 1<<20 {
			if files[h.Name], err = io.ReadAll(tr); err != nil {
				t.Fatal(err)
			}
		}
	}
	var layout, index ocispec.Index
	if err := json.Unmarshal(files["index.json"], &layout); err != nil || len(layout.Manifests) == 0 {
		t.Fatalf("%s's index.json: %v %s", archive, err, files["index.json"])
	}
	if err := json.Unmarshal(blobOf(t, files, layout.Manifests[0]), &index); err != nil {
		t.Fatal(err)
	}
	return Written{Index: layout.Manifests[0].Digest, Manifests: index.Manifests}
}

// TestPushRegistryContainerd: image push of an archive of three platforms
// (amd64, arm64, arm/v7; make image's own with $CNIBOX_IMAGE_TAR) to a
// real registry process (Debian's docker-registry on loopback): the
// registry holds the archive's index with each platform's image by the
// archive's digests. containerd on this host pulls the tag (ctr images
// pull, the host's platform): it names the image by the index's digest,
// holds the host's image manifest and none of the others; a pull by
// NAME@INDEX-DIGEST (the reference the rendered manifests use) works too,
// and with make image's archive the pulled image runs cnibox.
func TestPushRegistryContainerd(t *testing.T) {
	if testing.Short() {
		t.Skip("runs docker-registry and containerd")
	}
	for _, tool := range []string{"containerd", "ctr"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not installed (make deps)", tool)
		}
	}
	if !testenv.Root() {
		t.Skip("containerd runs as root")
	}
	host := startRegistry(t)
	archive, w := writeArchive(t, t.TempDir(), "ghcr.io/cnibox/cnibox:v1", "amd64", "arm64", "arm/v7")
	want := map[string]string{"amd64": "cnibox for amd64", "arm64": "cnibox for arm64", "arm/v7": "cnibox for arm/v7"}
	real := os.Getenv("CNIBOX_IMAGE_TAR")
	if real != "" {
		archive, w, want = real, archiveWritten(t, real), nil
	}
	ref := host + "/cnibox/cnibox:v1"
	var out, errOut bytes.Buffer
	if err := run([]string{"push", "-ref", ref, archive}, &out, &errOut); err != nil {
		t.Fatalf("image push: %v\n%s", err, errOut.String())
	}
	t.Log(strings.TrimSpace(out.String()))
	checkRegistryIndex(t, ref, w, want)

	c := startContainerd(t)
	c.mustRun("images", "pull", "--plain-http", ref)
	if ls := c.mustRun("images", "ls"); !strings.Contains(ls, ref) || !strings.Contains(ls, w.Index.String()) {
		t.Errorf("ctr images ls after the pull: want %s at %s:\n%s", ref, w.Index, ls)
	}
	content := c.mustRun("content", "ls", "-q")
	hostArch := 0
	for _, m := range w.Manifests {
		has := strings.Contains(content, m.Digest.String())
		if m.Platform.Architecture == runtime.GOARCH {
			hostArch++
			if !has {
				t.Errorf("containerd on linux/%s lacks that platform's image manifest %s:\n%s", runtime.GOARCH, m.Digest, content)
			}
		} else if has {
			t.Errorf("containerd on linux/%s pulled the image manifest of %s too", runtime.GOARCH, platformOf(&v1.Platform{Architecture: m.Platform.Architecture, Variant: m.Platform.Variant}))
		}
	}
	if hostArch != 1 {
		t.Fatalf("the index has %d images for linux/%s, want one", hostArch, runtime.GOARCH)
	}
	byDigest := host + "/cnibox/cnibox@" + w.Index.String()
	c.mustRun("images", "pull", "--plain-http", byDigest)
	if ls := c.mustRun("images", "ls", "-q"); !strings.Contains(ls, byDigest) {
		t.Errorf("pulled by the index's digest, containerd lists:\n%s", ls)
	}
	if real != "" {
		if out := c.mustRun("run", "--rm", byDigest, "pulled", "/usr/local/bin/cnibox", "version"); !strings.HasPrefix(out, "cnibox ") {
			t.Errorf("cnibox version in the pulled image: %q", out)
		}
	}
}
