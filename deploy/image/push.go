package main

import (
	"archive/tar"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// runPush is `image push -ref REGISTRY/NAME:TAG ARCHIVE`: the OCI image
// index of make image's archive (one image per platform), pushed to the
// registry with go-containerregistry, no container daemon. The index and
// each image manifest are pushed as the archive holds them, so the index's
// digest (the one the rendered manifests name) and every manifest's
// resolve in the registry; the push is as reproducible as the archive.
// Credentials come from the Docker config (~/.docker/config.json,
// $DOCKER_CONFIG), as `docker login` and `podman login` write them; a
// registry on loopback is spoken to over plain HTTP.
func runPush(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("image push", flag.ContinueOnError)
	fs.SetOutput(stderr)
	ref := fs.String("ref", "", "where to push: REGISTRY/NAME:TAG, e.g. registry.example/cnibox:v1.0.0")
	if err := parseArgs(fs, stderr, "usage: image push -ref REGISTRY/NAME:TAG ARCHIVE", args, ref); err != nil {
		return err
	}
	tag, err := name.NewTag(*ref, name.StrictValidation)
	if err != nil {
		return fmt.Errorf("-ref %q: %w", *ref, err)
	}
	if fs.NArg() != 1 {
		return fmt.Errorf("%d archives: name the one make image wrote (bin/cnibox-image.tar: every platform's image in one index)", fs.NArg())
	}
	dir, err := os.MkdirTemp("", "cnibox-push-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	idx, err := archiveIndex(fs.Arg(0), dir)
	if err != nil {
		return fmt.Errorf("%s: %w", fs.Arg(0), err)
	}
	if err := remote.WriteIndex(tag, idx, remote.WithAuthFromKeychain(authn.DefaultKeychain)); err != nil {
		return fmt.Errorf("push %s: %w", tag, err)
	}
	dgst, err := idx.Digest()
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s: pushed the index %s@%s\n", tag, tag, dgst)
	return nil
}

// archiveIndex unpacks an archive of make image (a tar of an OCI image
// layout) into dir and returns the image index its index.json names (by
// the tag and by digest: one index), which reads its blobs there.
func archiveIndex(archive, dir string) (v1.ImageIndex, error) {
	if err := untarLayout(archive, dir); err != nil {
		return nil, err
	}
	lp, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		return nil, fmt.Errorf("not an OCI image layout: %w", err)
	}
	im, err := lp.IndexManifest()
	if err != nil {
		return nil, err
	}
	var d *v1.Descriptor
	for i, m := range im.Manifests {
		if !m.MediaType.IsIndex() {
			return nil, fmt.Errorf("index.json names a %s, not an image index: an archive of an older make image? Run make image again", m.MediaType)
		}
		if d != nil && d.Digest != m.Digest {
			return nil, fmt.Errorf("index.json names two image indexes, %s and %s", d.Digest, m.Digest)
		}
		d = &im.Manifests[i]
	}
	if d == nil {
		return nil, errors.New("the archive's index.json names no image index")
	}
	return lp.ImageIndex(d.Digest)
}

// untarLayout unpacks the archive's regular files into dir, refusing a
// path that leaves it.
func untarLayout(archive, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f, err := os.Open(archive)
	if err != nil {
		return err
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("not a tar archive: %w", err)
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		p := filepath.Join(dir, filepath.FromSlash(h.Name))
		if !strings.HasPrefix(p, dir+string(filepath.Separator)) {
			return fmt.Errorf("the entry %q leaves the archive", h.Name)
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		out, err := os.Create(p)
		if err != nil {
			return err
		}
		_, err = io.Copy(out, tr)
		if cerr := out.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	}
}
