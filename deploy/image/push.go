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
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// runPush is `image push -ref REGISTRY/NAME:TAG ARCHIVE...`: one OCI image
// index of the archives' images (one per architecture, as make image
// writes them), pushed to the registry with go-containerregistry, no
// container daemon. Each image's manifest is pushed as the archive holds
// it, so its digest (the one the rendered manifests name) resolves in the
// registry; the index is as reproducible as the archives. Credentials come
// from the Docker config (~/.docker/config.json, $DOCKER_CONFIG), as
// `docker login` and `podman login` write them; a registry on loopback is
// spoken to over plain HTTP.
func runPush(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("image push", flag.ContinueOnError)
	fs.SetOutput(stderr)
	ref := fs.String("ref", "", "where to push: REGISTRY/NAME:TAG, e.g. registry.example/cnibox:v1.0.0")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: image push -ref REGISTRY/NAME:TAG ARCHIVE...")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := checkRef(*ref); err != nil {
		return err
	}
	tag, err := name.NewTag(*ref, name.StrictValidation)
	if err != nil {
		return fmt.Errorf("-ref %q: %w", *ref, err)
	}
	if fs.NArg() == 0 {
		return errors.New("no archives: name the image archives make image wrote (one per architecture)")
	}
	dir, err := os.MkdirTemp("", "cnibox-push-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	idx, err := indexOf(dir, fs.Args())
	if err != nil {
		return err
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

// indexOf is the OCI image index of every image in the archives, each with
// its platform from its config; two images for one platform are refused.
// The archives are unpacked under dir, which the index reads until it is
// pushed.
func indexOf(dir string, archives []string) (v1.ImageIndex, error) {
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	seen := map[string]string{}
	for i, a := range archives {
		imgs, err := archiveImages(a, filepath.Join(dir, fmt.Sprint(i)))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", a, err)
		}
		for _, img := range imgs {
			cfg, err := img.ConfigFile()
			if err != nil {
				return nil, fmt.Errorf("%s: the image's config: %w", a, err)
			}
			p := v1.Platform{OS: cfg.OS, Architecture: cfg.Architecture, Variant: cfg.Variant}
			if prev, ok := seen[p.String()]; ok {
				return nil, fmt.Errorf("%s and %s both hold an image for %s: give one archive per architecture", prev, a, p.String())
			}
			seen[p.String()] = a
			idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &p}})
		}
	}
	return idx, nil
}

// archiveImages unpacks an archive of make image (a tar of an OCI image
// layout) into dir and returns its images, which read their blobs there.
func archiveImages(archive, dir string) ([]v1.Image, error) {
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
	var imgs []v1.Image
	named := map[v1.Hash]bool{}
	for _, d := range im.Manifests {
		if named[d.Digest] {
			continue // the same image under another name (its tag, its digest)
		}
		named[d.Digest] = true
		img, err := lp.Image(d.Digest)
		if err != nil {
			return nil, err
		}
		imgs = append(imgs, img)
	}
	if len(imgs) == 0 {
		return nil, errors.New("the archive's index.json names no image")
	}
	return imgs, nil
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
