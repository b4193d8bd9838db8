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
	"regexp"
	"strings"
	"testing"
	"time"

	digest "github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// untar returns the archive's entries by name, failing the test unless
// they come in name order, owned by root, with mtime.
func untar(t *testing.T, r io.Reader, mtime time.Time) (map[string]*tar.Header, map[string][]byte) {
	t.Helper()
	hdrs, files := map[string]*tar.Header{}, map[string][]byte{}
	tr := tar.NewReader(r)
	prev := ""
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Name <= prev {
			t.Errorf("entry %s after %s: not sorted", h.Name, prev)
		}
		prev = h.Name
		if !h.ModTime.Equal(mtime) || h.Uid != 0 || h.Gid != 0 {
			t.Errorf("entry %s: mtime %v uid %d gid %d, want %v 0 0", h.Name, h.ModTime, h.Uid, h.Gid, mtime)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		hdrs[h.Name], files[h.Name] = h, b
	}
	return hdrs, files
}

// blobOf returns the blob d names, checking its digest and size.
func blobOf(t *testing.T, files map[string][]byte, d ocispec.Descriptor) []byte {
	t.Helper()
	b, ok := files["blobs/sha256/"+d.Digest.Encoded()]
	if !ok {
		t.Fatalf("no blob for %s", d.Digest)
	}
	if digest.FromBytes(b) != d.Digest || int64(len(b)) != d.Size {
		t.Fatalf("blob %s: digest %s size %d, want size %d", d.Digest, digest.FromBytes(b), len(b), d.Size)
	}
	return b
}

// TestArchive: the archive is an OCI layout and a docker-archive naming
// the same blobs, every digest is right, the layer holds the binaries in
// /usr/local/bin, and two builds are the same bytes.
func TestArchive(t *testing.T) {
	img := Image{
		Ref:     "ghcr.io/cnibox/cnibox:v9.9.9",
		Created: time.Unix(1700000000, 0).UTC(),
		OS:      "linux",
		Arch:    "amd64",
		Config:  imageConfig("ghcr.io/cnibox/cnibox:v9.9.9"),
		Files: []File{
			{Path: "usr/local/bin/cnibox", Mode: 0o755, Data: []byte("cnibox binary")},
			{Path: "usr/local/bin/cnibox-agent", Mode: 0o755, Data: []byte("agent binary")},
		},
	}
	var a, b bytes.Buffer
	w1, err := WriteArchive(&a, img)
	if err != nil {
		t.Fatal(err)
	}
	w2, err := WriteArchive(&b, img)
	if err != nil {
		t.Fatal(err)
	}
	if w1.Index != w2.Index || !bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Errorf("two builds differ: %s and %s", w1.Index, w2.Index)
	}

	_, files := untar(t, bytes.NewReader(a.Bytes()), img.Created)
	if s := string(files["oci-layout"]); !strings.Contains(s, `"imageLayoutVersion":"1.0.0"`) {
		t.Errorf("oci-layout = %s", s)
	}
	var layoutIndex ocispec.Index
	if err := json.Unmarshal(files["index.json"], &layoutIndex); err != nil || len(layoutIndex.Manifests) != 2 {
		t.Fatalf("index.json: %v %s", err, files["index.json"])
	}
	// the image index by its tag, and by digest: the rendered manifests'
	// reference
	d1 := w1.Index
	if byTag := layoutIndex.Manifests[0]; byTag.Digest != d1 || byTag.MediaType != ocispec.MediaTypeImageIndex ||
		byTag.Annotations[annotationImageName] != img.Ref || byTag.Annotations[ocispec.AnnotationRefName] != img.Ref {
		t.Errorf("index.json entry %+v, want the image index %s named %s", byTag, d1, img.Ref)
	}
	if byDigest := layoutIndex.Manifests[1]; byDigest.Digest != d1 || byDigest.Annotations[annotationImageName] != "ghcr.io/cnibox/cnibox@"+d1.String() {
		t.Errorf("second index.json entry %+v, want digest %s named ghcr.io/cnibox/cnibox@%s", byDigest, d1, d1)
	}
	var index ocispec.Index
	if err := json.Unmarshal(blobOf(t, files, layoutIndex.Manifests[0]), &index); err != nil || len(index.Manifests) != 1 || len(w1.Manifests) != 1 {
		t.Fatalf("the image index: %v %+v", err, index)
	}
	md := index.Manifests[0]
	if md.Digest != w1.Manifests[0].Digest || md.MediaType != ocispec.MediaTypeImageManifest {
		t.Errorf("the index's entry %+v, want the image manifest %s", md, w1.Manifests[0].Digest)
	}
	if md.Platform == nil || md.Platform.OS != "linux" || md.Platform.Architecture != "amd64" {
		t.Errorf("index entry platform %+v", md.Platform)
	}
	var man ocispec.Manifest
	if err := json.Unmarshal(blobOf(t, files, md), &man); err != nil || len(man.Layers) != 1 {
		t.Fatalf("manifest: %v %+v", err, man)
	}
	var cfg ocispec.Image
	if err := json.Unmarshal(blobOf(t, files, man.Config), &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.OS != "linux" || cfg.Architecture != "amd64" || !cfg.Created.Equal(img.Created) || cfg.Config.Labels[ocispec.AnnotationVersion] != "v9.9.9" {
		t.Errorf("config %+v", cfg)
	}
	zr, err := gzip.NewReader(bytes.NewReader(blobOf(t, files, man.Layers[0])))
	if err != nil {
		t.Fatal(err)
	}
	raw, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.RootFS.DiffIDs) != 1 || cfg.RootFS.DiffIDs[0] != digest.FromBytes(raw) {
		t.Errorf("diff IDs %v, want the uncompressed layer's %s", cfg.RootFS.DiffIDs, digest.FromBytes(raw))
	}
	hdrs, layer := untar(t, bytes.NewReader(raw), img.Created)
	for _, d := range []string{"usr/", "usr/local/", "usr/local/bin/"} {
		if h := hdrs[d]; h == nil || h.Typeflag != tar.TypeDir || h.Mode != 0o755 {
			t.Errorf("layer directory %s: %+v", d, h)
		}
	}
	for _, f := range img.Files {
		if h := hdrs[f.Path]; h == nil || h.Mode != 0o755 || string(layer[f.Path]) != string(f.Data) {
			t.Errorf("layer file %s: %+v %q", f.Path, h, layer[f.Path])
		}
	}
	if len(hdrs) != 5 {
		t.Errorf("layer has %d entries, want the 3 directories and 2 files", len(hdrs))
	}

	var docker []dockerManifest
	if err := json.Unmarshal(files["manifest.json"], &docker); err != nil || len(docker) != 1 {
		t.Fatalf("manifest.json: %v %s", err, files["manifest.json"])
	}
	dm := docker[0]
	if dm.Config != "blobs/sha256/"+man.Config.Digest.Encoded() || len(dm.Layers) != 1 ||
		dm.Layers[0] != "blobs/sha256/"+man.Layers[0].Digest.Encoded() || len(dm.RepoTags) != 1 || dm.RepoTags[0] != img.Ref {
		t.Errorf("manifest.json %+v does not name the OCI blobs and %s", dm, img.Ref)
	}
}

func TestCheckRef(t *testing.T) {
	for ref, ok := range map[string]bool{
		"ghcr.io/cnibox/cnibox:v1.0.0":        true,
		"ghcr.io/cnibox/cnibox:58b9fe1-dirty": true,
		"localhost:5000/cnibox:dev":           true,
		"ghcr.io/cnibox/cnibox":               false,
		"localhost:5000/cnibox":               false,
		"ghcr.io/CNIBOX/cnibox:v1":            false,
		"ghcr.io/cnibox/cnibox:v1+build":      false,
		"":                                    false,
		"ghcr.io/cnibox/cnibox:-dash":         false,
	} {
		if err := checkRef(ref); (err == nil) != ok {
			t.Errorf("checkRef(%q) = %v, want ok %v", ref, err, ok)
		}
	}
}

func TestRenderManifest(t *testing.T) {
	in := "spec:\n  initContainers:\n  - name: install\n    image: ghcr.io/cnibox/cnibox:dev\n" +
		"  containers:\n  - image: \"ghcr.io/cnibox/cnibox:dev\" # the agent\n    name: agent\n"
	out, err := RenderManifest([]byte(in), "ghcr.io/cnibox/cnibox:v2")
	if err != nil {
		t.Fatal(err)
	}
	want := "spec:\n  initContainers:\n  - name: install\n    image: ghcr.io/cnibox/cnibox:v2\n" +
		"  containers:\n  - image: \"ghcr.io/cnibox/cnibox:v2\" # the agent\n    name: agent\n"
	if string(out) != want {
		t.Errorf("rendered:\n%s\nwant:\n%s", out, want)
	}
	if _, err := RenderManifest([]byte("kind: Namespace\n"), "x:y"); err == nil {
		t.Error("a manifest without image: rendered without error")
	}
}

// TestNotInCnibox: the image-spec types are the builder's alone; cnibox,
// which runtimes exec on every CNI call, does not link them.
func TestNotInCnibox(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "github.com/cnibox/cnibox", "github.com/cnibox/cnibox/cmd/cnibox-agent").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		if strings.HasPrefix(dep, "github.com/opencontainers/") {
			t.Errorf("cnibox or its agent links %s: only deploy/image may", dep)
		}
	}
}

// TestRunManifests: run renders every -manifest into its -manifest-out
// (cnibox.yaml and cnibox-multus.yaml, as make image gives them): every
// image: names -ref and the digest of the image index built
// (-ref@sha256:...)
// and nothing else changed; an unpaired -manifest is refused before
// anything is written.
func TestRunManifests(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "cnibox")
	if err := os.WriteFile(bin, []byte("binary"), 0o755); err != nil {
		t.Fatal(err)
	}
	const ref = "ghcr.io/cnibox/cnibox:v7"
	ins := []string{"../kubernetes/cnibox.yaml", "../kubernetes/cnibox-multus.yaml"}
	args := []string{"-o", filepath.Join(dir, "image.tar"), "-ref", ref}
	for _, in := range ins {
		args = append(args, "-manifest", in, "-manifest-out", filepath.Join(dir, "out", filepath.Base(in)))
	}
	var stdout, stderr bytes.Buffer
	if err := run(append(args, bin), &stdout, &stderr); err != nil {
		t.Fatalf("run: %v\n%s", err, stderr.String())
	}
	dgst := regexp.MustCompile(`\(index (sha256:[0-9a-f]{64})\)`).FindStringSubmatch(stdout.String())
	if dgst == nil {
		t.Fatalf("run printed no index digest: %s", stdout.String())
	}
	pinned := ref + "@" + dgst[1]
	for _, in := range ins {
		src, err := os.ReadFile(in)
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join(dir, "out", filepath.Base(in)))
		if err != nil {
			t.Fatalf("%s not rendered: %v", in, err)
		}
		srcLines, gotLines := strings.Split(string(src), "\n"), strings.Split(string(got), "\n")
		if len(srcLines) != len(gotLines) {
			t.Fatalf("%s: %d lines rendered, %d in the source", in, len(gotLines), len(srcLines))
		}
		images := 0
		for i, l := range gotLines {
			if k, v, ok := strings.Cut(strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(l), "-")), ":"); ok && k == "image" {
				images++
				if strings.TrimSpace(v) != pinned {
					t.Errorf("%s line %d: %q, want image: %s", in, i+1, l, pinned)
				}
			} else if l != srcLines[i] {
				t.Errorf("%s line %d changed: %q -> %q", in, i+1, srcLines[i], l)
			}
		}
		if images == 0 {
			t.Errorf("%s: no image: rendered", in)
		}
	}
	out := filepath.Join(dir, "lone.yaml")
	err := run([]string{"-o", filepath.Join(dir, "b.tar"), "-ref", ref, "-manifest", ins[0], "-manifest", ins[1], "-manifest-out", out, bin}, &stdout, &stderr)
	if err == nil || !strings.Contains(err.Error(), "-manifest-out") {
		t.Errorf("two -manifest, one -manifest-out: %v", err)
	}
	if _, err := os.Stat(out); err == nil {
		t.Errorf("an unpaired -manifest wrote %s", out)
	}
}
