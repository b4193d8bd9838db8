// Command image builds cnibox's container image without a registry or a
// container daemon: `make image` runs it to write bin/cnibox-image.tar, an
// OCI image archive (with a docker-archive manifest.json beside the OCI
// layout) that `ctr images import` and `podman load` take. The image holds
// the given static binaries in /usr/local/bin; with -busybox also a static
// busybox in /bin and flannel's paths (flannel.go), so that flannel's own
// manifest runs on it.
//
// With -manifest it also writes the Kubernetes manifest with its image
// references set to the image built, by tag and digest (-ref@sha256:...,
// -manifest-out), so that the manifest and the archive always name the
// same image, and a node runs those bytes whatever the tag points at later;
// the archive names the image by that digest too, for ctr images import.
// Both flags repeat, paired in order: make image renders cnibox.yaml,
// cnibox-multus.yaml and cnibox-dhcp.yaml.
//
// The archive is reproducible: the same binaries, -ref and -epoch give the
// same bytes.
//
//	go run ./deploy/image -o bin/cnibox-image.tar -ref ghcr.io/cnibox/cnibox:v1 \
//	    -manifest deploy/kubernetes/cnibox.yaml -manifest-out bin/cnibox.yaml \
//	    -manifest deploy/kubernetes/cnibox-multus.yaml -manifest-out bin/cnibox-multus.yaml \
//	    -busybox /bin/busybox bin/cnibox bin/cnibox-agent bin/cnibox-agent-kube
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"time"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/cnibox/cnibox/internal/atomicfile"
)

// binDir is where the binaries go in the image.
const binDir = "usr/local/bin"

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

func run(args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "push" {
		return runPush(args[1:], stdout, stderr)
	}
	fs := flag.NewFlagSet("image", flag.ContinueOnError)
	fs.SetOutput(stderr)
	out := fs.String("o", "bin/cnibox-image.tar", "the image archive to write")
	ref := fs.String("ref", "", "the image's name and tag, e.g. ghcr.io/cnibox/cnibox:v1.0.0")
	epoch := fs.Int64("epoch", envEpoch(), "every file's mtime and the image's creation time, in Unix seconds (default $SOURCE_DATE_EPOCH, else 0)")
	arch := fs.String("arch", runtime.GOARCH, "the BINARY arguments' architecture")
	var manifests, manifestOuts, platforms listFlag
	fs.Var(&platforms, "platform", "OS/ARCH[/VARIANT]=DIR: an image for that platform of DIR's binaries (and DIR/busybox), in the one image index the archive holds (repeatable; in place of BINARY... and -busybox)")
	fs.Var(&manifests, "manifest", "a Kubernetes manifest whose image: references are set to -ref (repeatable)")
	fs.Var(&manifestOuts, "manifest-out", "where the manifest with -ref goes (one per -manifest, in order)")
	valuesOut := fs.String("values-out", "", "also write the Helm chart's image values (repository, tag, digest) naming the image built here (helm install -f FILE)")
	busybox := fs.String("busybox", "", "a static busybox for /bin (cp, sh, ...); with it the image also answers flannel's manifest (/flannel, /opt/bin/flanneld, /opt/bin/install-conf)")
	if err := parseArgs(fs, stderr, "usage: image -o ARCHIVE -ref NAME:TAG [-manifest IN -manifest-out OUT]... {-platform OS/ARCH=DIR... | BINARY...}", args, ref); err != nil {
		return err
	}
	if len(manifests) != len(manifestOuts) {
		return fmt.Errorf("-manifest and -manifest-out go together: %d manifests, %d outputs", len(manifests), len(manifestOuts))
	}
	created := time.Unix(*epoch, 0).UTC()
	var imgs []Image
	switch {
	case len(platforms) > 0 && (fs.NArg() > 0 || *busybox != ""):
		return errors.New("-platform names each platform's directory: give no BINARY arguments and no -busybox with it")
	case len(platforms) > 0:
		for _, spec := range platforms {
			img, err := platformImage(spec, *ref, created)
			if err != nil {
				return err
			}
			imgs = append(imgs, img)
		}
	case fs.NArg() == 0:
		return errors.New("no binaries: name the files to put into /" + binDir + ", or give -platform OS/ARCH=DIR")
	default:
		img, err := hostImage(fs.Args(), *busybox)
		if err != nil {
			return err
		}
		img.Ref, img.Created, img.OS, img.Arch, img.Config = *ref, created, "linux", *arch, imageConfig(*ref)
		imgs = append(imgs, img)
	}
	var buf bytes.Buffer
	written, err := WriteArchive(&buf, imgs...)
	if err != nil {
		return err
	}
	if err := writeFileAtomic(*out, buf.Bytes()); err != nil {
		return err
	}
	dgst := written.Index
	fmt.Fprintf(stdout, "%s: %s (index %s)\n", *out, *ref, dgst)
	for _, m := range written.Manifests {
		fmt.Fprintf(stdout, "  %s: manifest %s\n", path.Join(m.Platform.OS, m.Platform.Architecture, m.Platform.Variant), m.Digest)
	}
	// The manifests name the image index by its digest too: a node runs
	// these bytes (its platform's image of the index) and no others,
	// whatever the tag points at later (the archive names the index so as
	// well: ctr images import makes it resolvable).
	pinned := *ref + "@" + dgst.String()
	for i, in := range manifests {
		if err := renderFile(in, manifestOuts[i], pinned); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%s: %s with image %s\n", manifestOuts[i], in, pinned)
	}
	if *valuesOut != "" {
		i := strings.LastIndex(*ref, ":")
		values := fmt.Sprintf("# deploy/helm/cnibox's image values for the image make image built:\n"+
			"# helm install cnibox deploy/helm/cnibox -n kube-system -f %s\nimage:\n  repository: %s\n  tag: %q\n  digest: %s\n",
			*valuesOut, (*ref)[:i], (*ref)[i+1:], dgst)
		if err := writeFileAtomic(*valuesOut, []byte(values)); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%s: the chart's image values, %s\n", *valuesOut, pinned)
	}
	return nil
}

// renderFile writes the manifest in to out with its images set to ref.
func renderFile(in, out, ref string) error {
	data, err := os.ReadFile(in)
	if err != nil {
		return err
	}
	rendered, err := RenderManifest(data, ref)
	if err != nil {
		return fmt.Errorf("%s: %w", in, err)
	}
	return writeFileAtomic(out, rendered)
}

// listFlag is a flag that may repeat; its values in order.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }

func (l *listFlag) Set(v string) error {
	*l = append(*l, v)
	return nil
}

// imageConfig is the image's run configuration. Every container of the
// manifest gives its own command; the default one prints the version.
func imageConfig(ref string) ocispec.ImageConfig {
	return ocispec.ImageConfig{
		Env: []string{"PATH=/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin"},
		Cmd: []string{"/" + binDir + "/cnibox", "version"},
		Labels: map[string]string{
			ocispec.AnnotationTitle:    "cnibox",
			ocispec.AnnotationSource:   "https://github.com/cnibox/cnibox",
			ocispec.AnnotationVersion:  ref[strings.LastIndex(ref, ":")+1:],
			ocispec.AnnotationLicenses: "Apache-2.0",
		},
	}
}

// tagRe is a tag as the distribution spec allows it.
var tagRe = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$`)

// parseArgs parses args into fs (usage is its help's first line) and
// checks -ref, ref, which both commands take.
func parseArgs(fs *flag.FlagSet, stderr io.Writer, usage string, args []string, ref *string) error {
	fs.Usage = func() {
		fmt.Fprintln(stderr, usage)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	return checkRef(*ref)
}

// checkRef reports what is wrong with ref as a name:tag.
func checkRef(ref string) error {
	i := strings.LastIndex(ref, ":")
	if ref == "" || i < 0 || strings.Contains(ref[i:], "/") {
		return fmt.Errorf("-ref %q: give a name and a tag, e.g. ghcr.io/cnibox/cnibox:v1.0.0", ref)
	}
	if name := ref[:i]; name == "" || name != strings.ToLower(name) {
		return fmt.Errorf("-ref %q: the name must be lower case and not empty", ref)
	}
	if !tagRe.MatchString(ref[i+1:]) {
		return fmt.Errorf("-ref %q: the tag %q has characters a tag cannot have", ref, ref[i+1:])
	}
	return nil
}

// imageLineRe matches the value of a manifest's image: fields.
var imageLineRe = regexp.MustCompile(`(?m)^(\s*(?:-\s+)?image:\s*)("?)[^\s"#]+("?)`)

// RenderManifest returns manifest with every image: value set to ref.
func RenderManifest(manifest []byte, ref string) ([]byte, error) {
	if !imageLineRe.Match(manifest) {
		return nil, errors.New("no image: field to set")
	}
	return imageLineRe.ReplaceAll(manifest, []byte("${1}${2}"+ref+"${3}")), nil
}

// writeFileAtomic writes data to p (mode 0644) with atomicfile, creating
// p's directory if needed.
func writeFileAtomic(p string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	if err := atomicfile.WriteFile(p, data, 0o644); err != nil {
		return fmt.Errorf("write %s: %w", p, err)
	}
	return nil
}

// envEpoch is $SOURCE_DATE_EPOCH, or 0.
func envEpoch() int64 {
	n, _ := strconv.ParseInt(os.Getenv("SOURCE_DATE_EPOCH"), 10, 64)
	return n
}

// hostImage is the image of one platform from BINARY arguments and
// -busybox (its Files; the caller names it).
func hostImage(binaries []string, busybox string) (Image, error) {
	var img Image
	bins := map[string]bool{}
	for _, p := range binaries {
		data, err := os.ReadFile(p)
		if err != nil {
			return Image{}, err
		}
		img.Files = append(img.Files, File{Path: path.Join(binDir, filepath.Base(p)), Mode: 0o755, Data: data})
		bins[filepath.Base(p)] = true
	}
	if busybox == "" {
		return img, nil
	}
	bb, err := busyboxFiles(busybox)
	if err != nil {
		return Image{}, err
	}
	fl, err := flannelFiles(bins)
	if err != nil {
		return Image{}, err
	}
	img.Files = append(append(img.Files, bb...), fl...)
	return img, nil
}
