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
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// writeArchive writes an archive of a small image index with an image per
// platform (ARCH or ARCH/VARIANT, linux's) into dir and returns its path
// and what was written.
func writeArchive(t *testing.T, dir, ref string, platforms ...string) (string, Written) {
	t.Helper()
	var imgs []Image
	for _, p := range platforms {
		arch, variant, _ := strings.Cut(p, "/")
		imgs = append(imgs, Image{
			Ref: ref, Created: time.Unix(1700000000, 0).UTC(), OS: "linux", Arch: arch, Variant: variant, Config: imageConfig(ref),
			Files: []File{{Path: "usr/local/bin/cnibox", Mode: 0o755, Data: []byte("cnibox for " + p)}},
		})
	}
	var buf bytes.Buffer
	w, err := WriteArchive(&buf, imgs...)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "cnibox-image-"+strings.Join(platforms, "-")+".tar")
	path = strings.ReplaceAll(path, "/v", "-v")
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return path, w
}

// platformOf is ARCH or ARCH/VARIANT of an index entry.
func platformOf(p *v1.Platform) string {
	if p == nil {
		return ""
	}
	if p.Variant != "" {
		return p.Architecture + "/" + p.Variant
	}
	return p.Architecture
}

// checkRegistryIndex pulls ref's index from the registry as a client
// would: an OCI image index at the digest the archive gave it, with an
// entry per platform of w at the archive's manifest digest, each image's
// layer holding that platform's /usr/local/bin/cnibox (want, when given).
func checkRegistryIndex(t *testing.T, ref string, w Written, want map[string]string) {
	t.Helper()
	tag, err := name.NewTag(ref)
	if err != nil {
		t.Fatal(err)
	}
	idx, err := remote.Index(tag)
	if err != nil {
		t.Fatalf("pull the index: %v", err)
	}
	if mt, _ := idx.MediaType(); mt != types.OCIImageIndex {
		t.Errorf("%s is a %s, want an OCI image index", ref, mt)
	}
	if d, _ := idx.Digest(); d.String() != w.Index.String() {
		t.Errorf("the registry's %s is %s, the archive's index %s", ref, d, w.Index)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != len(w.Manifests) {
		t.Fatalf("the index names %d images, want %d: %+v", len(im.Manifests), len(w.Manifests), im.Manifests)
	}
	for i, m := range im.Manifests {
		wm := w.Manifests[i]
		p := platformOf(&v1.Platform{Architecture: wm.Platform.Architecture, Variant: wm.Platform.Variant})
		if m.Platform == nil || m.Platform.OS != "linux" || platformOf(m.Platform) != p || m.Digest.String() != wm.Digest.String() {
			t.Errorf("index entry %d: %s for %v, want linux/%s at the archive's digest %s", i, m.Digest, m.Platform, p, wm.Digest)
			continue
		}
		img, err := remote.Image(tag.Context().Digest(m.Digest.String()))
		if err != nil {
			t.Fatalf("pull %s by digest: %v", p, err)
		}
		cfg, err := img.ConfigFile()
		if err != nil || cfg.Architecture != wm.Platform.Architecture || cfg.Variant != wm.Platform.Variant {
			t.Errorf("%s's config: %+v %v", p, cfg, err)
		}
		layers, err := img.Layers()
		if err != nil || len(layers) != 1 {
			t.Fatalf("%s: layers %v %v", p, layers, err)
		}
		if w, ok := want[p]; ok {
			if got := layerFile(t, layers[0].Uncompressed, "usr/local/bin/cnibox"); got != w {
				t.Errorf("%s's usr/local/bin/cnibox is %q, want %q", p, got, w)
			}
		}
	}
}

// TestPush pushes an archive of three platforms (amd64, arm64, arm/v7) to
// a registry (go-containerregistry's, in process, on loopback) and pulls it
// back as a client would: the tag names the archive's OCI index, with each
// platform's image manifest by the archive's digest, whose layer holds
// that platform's binary; pushing again gives the same index digest.
func TestPush(t *testing.T) {
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	archive, w := writeArchive(t, t.TempDir(), "ghcr.io/cnibox/cnibox:v1", "amd64", "arm64", "arm/v7")

	to := host + "/cnibox/cnibox:v1"
	var out, errOut bytes.Buffer
	if err := run([]string{"push", "-ref", to, archive}, &out, &errOut); err != nil {
		t.Fatalf("image push: %v\n%s", err, errOut.String())
	}
	t.Log(strings.TrimSpace(out.String()))
	if !strings.Contains(out.String(), "@"+w.Index.String()) {
		t.Errorf("image push printed %q, want the archive's index %s", out.String(), w.Index)
	}
	checkRegistryIndex(t, to, w, map[string]string{"amd64": "cnibox for amd64", "arm64": "cnibox for arm64", "arm/v7": "cnibox for arm/v7"})

	out.Reset()
	if err := run([]string{"push", "-ref", to, archive}, &out, &errOut); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), w.Index.String()) {
		t.Errorf("a second push gave another index: %s, want %s", out.String(), w.Index)
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

// TestPushRefusals: a bad reference, no archive, two archives, an archive
// that is not make image's: each refused with what to do.
func TestPushRefusals(t *testing.T) {
	dir := t.TempDir()
	amd, _ := writeArchive(t, dir, "ghcr.io/cnibox/cnibox:v1", "amd64")
	notLayout := filepath.Join(dir, "other.tar")
	if err := os.WriteFile(notLayout, []byte("not a tar"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"push", "-ref", "127.0.0.1:1/cnibox", amd}, "give a name and a tag"},
		{[]string{"push", "-ref", "127.0.0.1:1/cnibox:v1"}, "name the one make image wrote"},
		{[]string{"push", "-ref", "127.0.0.1:1/cnibox:v1", amd, amd}, "name the one make image wrote"},
		{[]string{"push", "-ref", "127.0.0.1:1/cnibox:v1", filepath.Join(dir, "none.tar")}, "no such file"},
		{[]string{"push", "-ref", "127.0.0.1:1/cnibox:v1", notLayout}, "not a tar archive"},
	} {
		err := run(c.args, io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want an error saying %q", c.args, err, c.want)
		}
	}
}
