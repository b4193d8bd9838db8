package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// layerOf returns the entries of the one layer of the first image of an
// archive WriteArchive wrote.
func layerOf(t *testing.T, archive []byte, mtime time.Time) (map[string]*tar.Header, map[string][]byte) {
	t.Helper()
	_, files := untar(t, bytes.NewReader(archive), mtime)
	var layout, index ocispec.Index
	if err := json.Unmarshal(files["index.json"], &layout); err != nil || len(layout.Manifests) != 2 {
		t.Fatalf("index.json: %v", err)
	}
	if err := json.Unmarshal(blobOf(t, files, layout.Manifests[0]), &index); err != nil || len(index.Manifests) == 0 {
		t.Fatalf("the image index: %v", err)
	}
	var man ocispec.Manifest
	if err := json.Unmarshal(blobOf(t, files, index.Manifests[0]), &man); err != nil || len(man.Layers) != 1 {
		t.Fatalf("manifest: %v %+v", err, man)
	}
	zr, err := gzip.NewReader(bytes.NewReader(blobOf(t, files, man.Layers[0])))
	if err != nil {
		t.Fatal(err)
	}
	raw, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	return untar(t, bytes.NewReader(raw), mtime)
}

// TestFlannelLayout: with -busybox the layer has what kube-flannel.yml's
// containers run: /flannel the same file as cnibox (a hard link, so cp
// copies cnibox), /opt/bin/flanneld a link to cnibox-agent-kube,
// /opt/bin/install-conf, and busybox with its applets.
func TestFlannelLayout(t *testing.T) {
	if _, err := os.Stat(busyboxBin); err != nil {
		t.Skipf("%v (apt-get install busybox-static)", err)
	}
	dir := t.TempDir()
	var bins []string
	for _, b := range []string{"cnibox", "cnibox-agent-kube"} {
		p := filepath.Join(dir, b)
		if err := os.WriteFile(p, []byte(b+" binary"), 0o755); err != nil {
			t.Fatal(err)
		}
		bins = append(bins, p)
	}
	archive := filepath.Join(dir, "image.tar")
	var stdout, stderr bytes.Buffer
	args := append([]string{"-o", archive, "-ref", testRef, "-epoch", "1700000000", "-busybox", busyboxBin}, bins...)
	if err := run(args, &stdout, &stderr); err != nil {
		t.Fatalf("image %v: %v\n%s", args, err, stderr.String())
	}
	data, err := os.ReadFile(archive)
	if err != nil {
		t.Fatal(err)
	}
	hdrs, files := layerOf(t, data, time.Unix(1700000000, 0).UTC())
	if h := hdrs["flannel"]; h == nil || h.Typeflag != tar.TypeReg || h.Mode != 0o755 || string(files["flannel"]) != "cnibox binary" {
		t.Errorf("/flannel: %+v %q, want cnibox, executable", h, files["flannel"])
	}
	if h := hdrs["usr/local/bin/cnibox"]; h == nil || h.Typeflag != tar.TypeLink || h.Linkname != "flannel" {
		t.Errorf("/usr/local/bin/cnibox: %+v, want a hard link to /flannel", h)
	}
	if h := hdrs["opt/bin/flanneld"]; h == nil || h.Typeflag != tar.TypeSymlink || h.Linkname != "/usr/local/bin/cnibox-agent-kube" {
		t.Errorf("/opt/bin/flanneld: %+v, want a link to cnibox-agent-kube", h)
	}
	if h := hdrs["opt/bin/install-conf"]; h == nil || h.Mode != 0o755 || string(files["opt/bin/install-conf"]) != installConfScript {
		t.Errorf("/opt/bin/install-conf: %+v", h)
	}
	for _, a := range append([]string{"busybox"}, busyboxApplets...) {
		if h := hdrs["bin/"+a]; h == nil || a != "busybox" && (h.Typeflag != tar.TypeSymlink || h.Linkname != "busybox") {
			t.Errorf("/bin/%s: %+v", a, h)
		}
	}

	// Without cnibox-agent-kube there is no flanneld to lay out.
	if err := run([]string{"-o", archive, "-ref", testRef, "-busybox", busyboxBin, bins[0]}, &stdout, &stderr); err == nil ||
		!strings.Contains(err.Error(), "cnibox-agent-kube") {
		t.Errorf("-busybox without cnibox-agent-kube: %v", err)
	}
	// A dynamic busybox would not run in an image without libraries.
	if err := run([]string{"-o", archive, "-ref", testRef, "-busybox", "/bin/true", bins[0], bins[1]}, &stdout, &stderr); err == nil ||
		!strings.Contains(err.Error(), "linked dynamically") {
		t.Errorf("-busybox /bin/true: %v", err)
	}
}

// busyboxBin is Debian's busybox-static.
const busyboxBin = "/bin/busybox"

// TestInstallConf runs the install-conf script with busybox's shell: it
// replaces the destination with the source, leaves no temporary file, and
// fails with flannel's usage line on other arguments.
func TestInstallConf(t *testing.T) {
	if _, err := os.Stat(busyboxBin); err != nil {
		t.Skipf("%v (apt-get install busybox-static)", err)
	}
	dir := t.TempDir()
	script := filepath.Join(dir, "install-conf")
	src, dst := filepath.Join(dir, "cni-conf.json"), filepath.Join(dir, "net.d", "10-flannel.conflist")
	for p, data := range map[string]string{script: installConfScript, src: `{"name":"cbr0"}`, dst: "old"} {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	sh := func(args ...string) (string, error) {
		cmd := exec.Command(busyboxBin, append([]string{"sh", script}, args...)...)
		cmd.Env = []string{"PATH=" + dir + "/bb"}
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	// busybox's applets by name, as the image has them
	if err := os.MkdirAll(filepath.Join(dir, "bb"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, a := range busyboxApplets {
		if err := os.Symlink(busyboxBin, filepath.Join(dir, "bb", a)); err != nil {
			t.Fatal(err)
		}
	}
	if out, err := sh(src, dst); err != nil {
		t.Fatalf("install-conf: %v\n%s", err, out)
	}
	if got, _ := os.ReadFile(dst); string(got) != `{"name":"cbr0"}` {
		t.Errorf("the destination holds %q", got)
	}
	if ents, _ := os.ReadDir(filepath.Dir(dst)); len(ents) != 1 {
		t.Errorf("the destination's directory holds %v, want the conflist alone", ents)
	}
	if out, err := sh(src); err == nil || !strings.Contains(out, "usage: ") {
		t.Errorf("install-conf with one argument: %v %q", err, out)
	}
	if out, err := sh(filepath.Join(dir, "missing"), dst); err == nil || !strings.Contains(out, "error installing") {
		t.Errorf("install-conf of a missing file: %v %q", err, out)
	}
	if got, _ := os.ReadFile(dst); string(got) != `{"name":"cbr0"}` {
		t.Errorf("a failed install-conf changed the destination: %q", got)
	}
}
