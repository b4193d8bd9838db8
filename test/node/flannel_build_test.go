//go:build kube

package node

import (
	"debug/elf"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cnibox/cnibox/test/internal/flanneld"
)

// flannel's own release, as its stock manifest (testdata/kube-flannel.yml,
// Documentation/kube-flannel.yml of v0.28.9) names it. Neither image is
// pulled: the test builds both (test/internal/flanneld: flanneld,
// install-conf and the flannel CNI plugin from the Go module proxy, once
// per version, in the host's namespaces) and imports them under these
// names, so the manifest runs unchanged.
const (
	flannelImage    = "ghcr.io/flannel-io/flannel:" + flanneld.Version
	flannelCNIImage = "ghcr.io/flannel-io/flannel-cni-plugin:v1.9.1-flannel3"
)

// flannelBinaries is test/internal/flanneld's directory.
func flannelBinaries(t *testing.T) string {
	t.Helper()
	dir, err := flanneld.Dir()
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// libDirs are where the dynamic loader finds the libraries of Debian's
// binaries.
var libDirs = []string{"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib/aarch64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/lib64", "/lib", "/usr/lib"}

// withLibraries adds to files (image path -> host path) the dynamic loader
// and every library the ELF files among them need, transitively, at the
// paths the host has them.
func withLibraries(t *testing.T, files map[string]string) {
	t.Helper()
	todo := make([]string, 0, len(files))
	for _, host := range files {
		todo = append(todo, host)
	}
	for len(todo) > 0 {
		host := todo[0]
		todo = todo[1:]
		f, err := elf.Open(host)
		if err != nil {
			continue // a script or data
		}
		libs, err := f.ImportedLibraries()
		for _, p := range f.Progs {
			if p.Type == elf.PT_INTERP {
				b := make([]byte, p.Filesz)
				p.ReadAt(b, 0)
				libs = append(libs, strings.TrimRight(string(b), "\x00"))
			}
		}
		f.Close()
		if err != nil {
			t.Fatalf("%s: %v", host, err)
		}
		for _, lib := range libs {
			path := lib
			if !filepath.IsAbs(lib) {
				path = ""
				for _, d := range libDirs {
					if _, err := os.Stat(filepath.Join(d, lib)); err == nil {
						path = filepath.Join(d, lib)
						break
					}
				}
				if path == "" {
					t.Fatalf("%s needs %s, which is in none of %v", host, lib, libDirs)
				}
			}
			if _, ok := files[path]; !ok {
				files[path] = path
				todo = append(todo, path)
			}
		}
	}
}

// iptablesFiles are Debian's iptables (nft) with its extensions, as
// flanneld's iptables mode execs them: image path -> host path. The
// image's iptables is xtables-nft-multi under each name.
func iptablesFiles(t *testing.T) (files map[string]string, links map[string]string) {
	t.Helper()
	multi := "/usr/sbin/xtables-nft-multi"
	if _, err := os.Stat(multi); err != nil {
		t.Fatalf("%v (apt-get install iptables)", err)
	}
	files = map[string]string{multi: multi}
	links = map[string]string{}
	for _, n := range []string{"iptables", "iptables-save", "iptables-restore", "ip6tables", "ip6tables-save", "ip6tables-restore"} {
		links["/usr/sbin/"+n] = "xtables-nft-multi"
	}
	// the extensions' directory as libxtables names it (on a merged-/usr
	// Debian, /lib is a link the image does not have)
	var ext string
	for _, d := range libDirs {
		if fi, err := os.Stat(filepath.Join(d, "xtables")); err == nil && fi.IsDir() {
			if ext, err = filepath.EvalSymlinks(filepath.Join(d, "xtables")); err != nil {
				t.Fatal(err)
			}
			break
		}
	}
	if ext == "" {
		t.Fatalf("no xtables extensions directory in %v", libDirs)
	}
	ents, err := os.ReadDir(ext)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		p := filepath.Join(ext, e.Name())
		// the image has them where libxtables looks
		if e.Type()&os.ModeSymlink != 0 {
			target, err := os.Readlink(p)
			if err != nil {
				t.Fatal(err)
			}
			links[p] = target
			continue
		}
		files[p] = p
	}
	withLibraries(t, files)
	return files, links
}

// writeFlannelImages writes flannel's two images, as docker-archives, into
// dir: flannelImage (flanneld, install-conf, iptables with its libraries)
// and flannelCNIImage (the flannel CNI plugin as /flannel); both have
// busybox for cp and a shell, as flannel's alpine images do. It returns
// their paths.
func writeFlannelImages(t *testing.T, dir string) []string {
	t.Helper()
	bins := flannelBinaries(t)
	ipt, links := iptablesFiles(t)
	ipt["/opt/bin/flanneld"] = filepath.Join(bins, "flanneld")
	ipt["/opt/bin/install-conf"] = filepath.Join(bins, "install-conf")
	fl := hostFiles(t, ipt, links)
	flannel := filepath.Join(dir, "flannel-image.tar")
	writeImage(t, flannel, flannelImage, []string{"/opt/bin/flanneld"}, fl)
	cni := filepath.Join(dir, "flannel-cni-image.tar")
	writeImage(t, cni, flannelCNIImage, []string{"sh"}, []imageFile{fileFrom(t, "/flannel", filepath.Join(bins, "flannel"))})
	return []string{flannel, cni}
}

// hostFiles are the host's files (image path -> host path) and the
// symbolic links (image path -> target) as an image's entries.
func hostFiles(t *testing.T, files, links map[string]string) []imageFile {
	t.Helper()
	var img []imageFile
	for image, host := range files {
		img = append(img, fileFrom(t, image, host))
	}
	for image, target := range links {
		img = append(img, imageFile{path: image, link: target})
	}
	return img
}

// fileFrom is the host's file host at path in an image.
func fileFrom(t *testing.T, path, host string) imageFile {
	t.Helper()
	data, err := os.ReadFile(host)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(host)
	if err != nil {
		t.Fatal(err)
	}
	return imageFile{path: path, data: data, mode: int64(fi.Mode().Perm())}
}

// checkStatic fails unless the file at path is a static executable.
func checkStatic(t *testing.T, path string) {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Fatalf("%s is linked dynamically", path)
		}
	}
}
