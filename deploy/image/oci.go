package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	_ "crypto/sha256" // go-digest's sha256 digester
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"sort"
	"strings"
	"time"

	digest "github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// annotationImageName is the annotation containerd names an imported image
// after.
const annotationImageName = "io.containerd.image.name"

// File is one entry of the image's layer: a regular file, or with Symlink
// or HardLink set, a link (Data and Mode unused).
type File struct {
	Path     string // inside the image, relative: usr/local/bin/cnibox
	Mode     int64
	Data     []byte
	Symlink  string // the link's target, as ln -s takes it
	HardLink string // the file it is another name of, relative like Path
}

// Image describes the image of one platform.
type Image struct {
	Ref     string    // name:tag, e.g. ghcr.io/cnibox/cnibox:v1.0.0
	Created time.Time // the config's creation time and every mtime
	OS      string
	Arch    string
	Variant string // arm's v7
	Config  ocispec.ImageConfig
	Files   []File
}

// blob is one content-addressed file of the archive.
type blob struct {
	desc ocispec.Descriptor
	data []byte
}

func newBlob(mediaType string, data []byte) blob {
	return blob{desc: ocispec.Descriptor{MediaType: mediaType, Digest: digest.FromBytes(data), Size: int64(len(data))}, data: data}
}

// path is where the blob lives in an OCI image layout.
func (b blob) path() string {
	return path.Join(ocispec.ImageBlobsDir, b.desc.Digest.Algorithm().String(), b.desc.Digest.Encoded())
}

// dockerManifest is one entry of a docker-archive's manifest.json.
type dockerManifest struct {
	Config   string
	RepoTags []string
	Layers   []string
}

// Written is what WriteArchive wrote: the digest of the image index,
// the name the rendered manifests give with the tag, and each image
// manifest (with its platform), in the order of the images given.
type Written struct {
	Index     digest.Digest
	Manifests []ocispec.Descriptor
}

// WriteArchive writes imgs (one per platform, all named imgs[0].Ref and
// created at imgs[0].Created) as one OCI image index in one tar stream
// that is both an OCI image layout (oci-layout, index.json,
// blobs/sha256/...) and a docker-archive (manifest.json naming the first
// image's blobs: docker load takes one platform), so that `ctr images
// import` (which picks the host's platform from the index), `podman load`
// and `docker load` all take it. The layout's index.json names the image
// index by the tag and as NAME@DIGEST. The output depends only on imgs:
// entries are sorted, and owners and mtimes are fixed.
func WriteArchive(w io.Writer, imgs ...Image) (Written, error) {
	if len(imgs) == 0 {
		return Written{}, errors.New("no image to write")
	}
	ref, created := imgs[0].Ref, imgs[0].Created.UTC()
	files := map[string][]byte{}
	var written Written
	var docker dockerManifest
	seen := map[string]bool{}
	for i, img := range imgs {
		p := ocispec.Platform{OS: img.OS, Architecture: img.Arch, Variant: img.Variant}
		key := path.Join(p.OS, p.Architecture, p.Variant)
		if seen[key] {
			return Written{}, fmt.Errorf("two images for %s: give one per platform", key)
		}
		seen[key] = true
		img.Ref, img.Created = ref, created
		blobs, err := imageBlobs(img)
		if err != nil {
			return Written{}, fmt.Errorf("%s: %w", key, err)
		}
		for _, b := range blobs {
			files[b.path()] = b.data
		}
		layer, cfg, man := blobs[0], blobs[1], blobs[2]
		desc := man.desc
		desc.Platform = &p
		written.Manifests = append(written.Manifests, desc)
		if i == 0 {
			docker = dockerManifest{Config: cfg.path(), RepoTags: []string{ref}, Layers: []string{layer.path()}}
		}
	}
	indexBlob, err := jsonBlob(ocispec.MediaTypeImageIndex, ocispec.Index{
		Versioned: specs.Versioned{SchemaVersion: 2},
		MediaType: ocispec.MediaTypeImageIndex,
		Manifests: written.Manifests,
	})
	if err != nil {
		return Written{}, err
	}
	files[indexBlob.path()] = indexBlob.data
	written.Index = indexBlob.desc.Digest
	// The index by its tag and by NAME@DIGEST, the reference the rendered
	// manifests give: containerd's import names the image so too, and the
	// kubelet finds it without a registry.
	byTag, byDigest := indexBlob.desc, indexBlob.desc
	byTag.Annotations = map[string]string{annotationImageName: ref, ocispec.AnnotationRefName: ref}
	byDigest.Annotations = map[string]string{annotationImageName: repository(ref) + "@" + written.Index.String()}
	layoutIndex, err := json.Marshal(ocispec.Index{
		Versioned: specs.Versioned{SchemaVersion: 2},
		MediaType: ocispec.MediaTypeImageIndex,
		Manifests: []ocispec.Descriptor{byTag, byDigest},
	})
	if err != nil {
		return Written{}, err
	}
	layout, err := json.Marshal(ocispec.ImageLayout{Version: ocispec.ImageLayoutVersion})
	if err != nil {
		return Written{}, err
	}
	dockerJSON, err := json.Marshal([]dockerManifest{docker})
	if err != nil {
		return Written{}, err
	}
	files[ocispec.ImageLayoutFile] = layout
	files[ocispec.ImageIndexFile] = layoutIndex
	files["manifest.json"] = dockerJSON
	if err := writeTar(w, files, created); err != nil {
		return Written{}, err
	}
	return written, nil
}

// imageBlobs builds one platform's image: its layer, config and manifest,
// in that order.
func imageBlobs(img Image) ([]blob, error) {
	layer, diffID, err := layerBlob(img)
	if err != nil {
		return nil, err
	}
	cfg := ocispec.Image{
		Created:  &img.Created,
		Platform: ocispec.Platform{OS: img.OS, Architecture: img.Arch, Variant: img.Variant},
		Config:   img.Config,
		RootFS:   ocispec.RootFS{Type: "layers", DiffIDs: []digest.Digest{diffID}},
		History:  []ocispec.History{{Created: &img.Created, CreatedBy: "cnibox deploy/image"}},
	}
	cfgBlob, err := jsonBlob(ocispec.MediaTypeImageConfig, cfg)
	if err != nil {
		return nil, err
	}
	manBlob, err := jsonBlob(ocispec.MediaTypeImageManifest, ocispec.Manifest{
		Versioned: specs.Versioned{SchemaVersion: 2},
		MediaType: ocispec.MediaTypeImageManifest,
		Config:    cfgBlob.desc,
		Layers:    []ocispec.Descriptor{layer.desc},
	})
	if err != nil {
		return nil, err
	}
	return []blob{layer, cfgBlob, manBlob}, nil
}

// layerBlob builds the image's one layer: img.Files and their parent
// directories, as a gzipped tar. It also returns the digest of the
// uncompressed tar (the layer's diff ID).
func layerBlob(img Image) (blob, digest.Digest, error) {
	files := map[string]File{}
	for _, f := range img.Files {
		f.Path = strings.TrimPrefix(path.Clean(f.Path), "/")
		f.HardLink = strings.TrimPrefix(path.Clean(f.HardLink), "/")
		files[f.Path] = f
	}
	var raw bytes.Buffer
	if err := writeTarFiles(&raw, files, img.Created); err != nil {
		return blob{}, "", err
	}
	diffID := digest.FromBytes(raw.Bytes())
	var gz bytes.Buffer
	zw, err := gzip.NewWriterLevel(&gz, gzip.DefaultCompression)
	if err != nil {
		return blob{}, "", err
	}
	if _, err := zw.Write(raw.Bytes()); err != nil {
		return blob{}, "", err
	}
	if err := zw.Close(); err != nil {
		return blob{}, "", err
	}
	return newBlob(ocispec.MediaTypeImageLayerGzip, gz.Bytes()), diffID, nil
}

func jsonBlob(mediaType string, v any) (blob, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return blob{}, err
	}
	return newBlob(mediaType, data), nil
}

// writeTar writes files (mode 0644) and their directories.
func writeTar(w io.Writer, files map[string][]byte, mtime time.Time) error {
	fs := make(map[string]File, len(files))
	for p, data := range files {
		fs[p] = File{Path: p, Mode: 0o644, Data: data}
	}
	return writeTarFiles(w, fs, mtime)
}

// writeTarFiles writes files (by path) and every parent directory (0755),
// in name order, owned by root, with mtime. A file with HardLink is another
// name of a regular file of files: whichever of the two names sorts first
// holds the data, the other is a hard link to it (a tar's hard link must
// follow its target).
func writeTarFiles(w io.Writer, files map[string]File, mtime time.Time) error {
	entries := map[string]bool{} // name -> is a directory
	for p := range files {
		entries[p] = false
		for d := path.Dir(p); d != "."; d = path.Dir(d) {
			entries[d] = true
		}
	}
	data := map[string]File{}     // name -> the regular file it holds
	linkTo := map[string]string{} // name -> the earlier name it links to
	for p, f := range files {
		if f.HardLink == "" || f.HardLink == "." {
			continue
		}
		target, ok := files[f.HardLink]
		if !ok || target.HardLink != "" && target.HardLink != "." || target.Symlink != "" {
			return fmt.Errorf("tar %s: a hard link to %s, which is not a regular file of the image", p, f.HardLink)
		}
		first, second := min(p, f.HardLink), max(p, f.HardLink)
		data[first], linkTo[second] = target, first
	}
	names := make([]string, 0, len(entries))
	for n := range entries {
		names = append(names, n)
	}
	sort.Strings(names)
	tw := tar.NewWriter(w)
	for _, n := range names {
		hdr := &tar.Header{Name: n, ModTime: mtime}
		f := files[n]
		if d, ok := data[n]; ok {
			f = d
		}
		switch {
		case entries[n]:
			hdr.Typeflag, hdr.Name, hdr.Mode = tar.TypeDir, n+"/", 0o755
		case linkTo[n] != "":
			hdr.Typeflag, hdr.Linkname, hdr.Mode = tar.TypeLink, linkTo[n], data[linkTo[n]].Mode
		case f.Symlink != "":
			hdr.Typeflag, hdr.Linkname, hdr.Mode = tar.TypeSymlink, f.Symlink, 0o777
		default:
			hdr.Typeflag, hdr.Size, hdr.Mode = tar.TypeReg, int64(len(f.Data)), f.Mode
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return fmt.Errorf("tar %s: %w", n, err)
		}
		if hdr.Typeflag == tar.TypeReg {
			if _, err := tw.Write(f.Data); err != nil {
				return fmt.Errorf("tar %s: %w", n, err)
			}
		}
	}
	return tw.Close()
}

// repository is ref (NAME:TAG) without its tag.
func repository(ref string) string {
	if i := strings.LastIndex(ref, ":"); i > strings.LastIndex(ref, "/") {
		return ref[:i]
	}
	return ref
}
