package main

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
	digest "github.com/opencontainers/go-digest"
)

// writeArchiveFor writes an archive of a small image for arch into dir and
// returns its path and the image manifest's digest.
func writeArchiveFor(t *testing.T, dir, ref, arch string) (string, digest.Digest) {
	t.Helper()
	img := Image{
		Ref: ref, Created: time.Unix(1700000000, 0).UTC(), OS: "linux", Arch: arch, Config: imageConfig(ref),
		Files: []File{{Path: "usr/local/bin/cnibox", Mode: 0o755, Data: []byte("cnibox for " + arch)}},
	}
	var buf bytes.Buffer
	d, err := WriteArchive(&buf, img)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "cnibox-image-"+arch+".tar")
	if err := os.WriteFile(p, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return p, d
}

// TestPush pushes two archives (amd64, arm64) to a registry (go-
// containerregistry's, in process, on loopback) as one index and pulls it
// back as a client would: the tag names an OCI index with both platforms,
// each entry is the archive's image manifest by the same digest (the one
// make image renders into the manifests), whose layer holds that arch's
// binary; pushing again gives the same index digest.
func TestPush(t *testing.T) {
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	dir := t.TempDir()
	ref := "ghcr.io/cnibox/cnibox:v1"
	amd, amdDigest := writeArchiveFor(t, dir, ref, "amd64")
	arm, armDigest := writeArchiveFor(t, dir, ref, "arm64")

	to := host + "/cnibox/cnibox:v1"
	var out, errOut bytes.Buffer
	if err := run([]string{"push", "-ref", to, amd, arm}, &out, &errOut); err != nil {
		t.Fatalf("image push: %v\n%s", err, errOut.String())
	}
	t.Log(strings.TrimSpace(out.String()))

	tag, err := name.NewTag(to)
	if err != nil {
		t.Fatal(err)
	}
	idx, err := remote.Index(tag)
	if err != nil {
		t.Fatalf("pull the index: %v", err)
	}
	if mt, _ := idx.MediaType(); mt != types.OCIImageIndex {
		t.Errorf("%s is a %s, want an OCI image index", to, mt)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]digest.Digest{"amd64": amdDigest, "arm64": armDigest}
	if len(im.Manifests) != len(want) {
		t.Fatalf("the index names %d images, want %d: %+v", len(im.Manifests), len(want), im.Manifests)
	}
	for _, m := range im.Manifests {
		arch := m.Platform.Architecture
		if m.Platform.OS != "linux" || m.Digest.String() != want[arch].String() {
			t.Errorf("index entry %s for %s: want linux/%s at the archive's digest %s", m.Digest, m.Platform, arch, want[arch])
			continue
		}
		img, err := remote.Image(tag.Context().Digest(m.Digest.String()))
		if err != nil {
			t.Fatalf("pull %s by digest: %v", arch, err)
		}
		layers, err := img.Layers()
		if err != nil || len(layers) != 1 {
			t.Fatalf("%s: layers %v %v", arch, layers, err)
		}
		if got := layerFile(t, layers[0].Uncompressed, "usr/local/bin/cnibox"); got != "cnibox for "+arch {
			t.Errorf("%s's usr/local/bin/cnibox is %q", arch, got)
		}
	}

	d1, _ := idx.Digest()
	out.Reset()
	if err := run([]string{"push", "-ref", to, amd, arm}, &out, &errOut); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), d1.String()) {
		t.Errorf("a second push gave another index: %s, first %s", out.String(), d1)
	}
}

// layerFile is the content of path in the layer open returns.
func layerFile(t *testing.T, open func() (io.ReadCloser, error), path string) string {
	t.Helper()
	rc, err := open()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return ""
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Name == path {
			b, _ := io.ReadAll(tr)
			return string(b)
		}
	}
}

// TestPushRefusals: a bad reference, no archive, two archives of one
// architecture, each refused with what to do.
func TestPushRefusals(t *testing.T) {
	dir := t.TempDir()
	amd, _ := writeArchiveFor(t, dir, "ghcr.io/cnibox/cnibox:v1", "amd64")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"push", "-ref", "127.0.0.1:1/cnibox", amd}, "give a name and a tag"},
		{[]string{"push", "-ref", "127.0.0.1:1/cnibox:v1"}, "no archives"},
		{[]string{"push", "-ref", "127.0.0.1:1/cnibox:v1", amd, amd}, "one archive per architecture"},
		{[]string{"push", "-ref", "127.0.0.1:1/cnibox:v1", filepath.Join(dir, "none.tar")}, "no such file"},
	} {
		err := run(c.args, io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want an error saying %q", c.args, err, c.want)
		}
	}
}
