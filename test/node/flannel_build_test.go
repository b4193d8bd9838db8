//go:build kube

package node

import (
	"bytes"
	"debug/elf"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// flannel's own release, as its stock manifest (testdata/kube-flannel.yml,
// Documentation/kube-flannel.yml of v0.28.9) names it. Neither image is
// pulled: the test builds both from the Go module proxy and imports them
// under these names, so the manifest runs unchanged.
const (
	flannelVersion   = "v0.28.9"
	flannelImage     = "ghcr.io/flannel-io/flannel:" + flannelVersion
	flannelCNIImage  = "ghcr.io/flannel-io/flannel-cni-plugin:v1.9.1-flannel3"
	flannelModule = "github.com/flannel-io/flannel"
	// flannel-io/cni-plugin is not on the module proxy; its flannel plugin
	// is the one containernetworking/plugins shipped until v0.9.1 (the same
	// code; cni-plugin added multiple networks' routes and a DEL that
	// tolerates a bad config), built from there.
	flannelCNIModule = "github.com/containernetworking/plugins/plugins/meta/flannel@v0.9.1"
)

// droppedBackends are the backends whose imports are dropped from a copy
// of flanneld's main.go: tencentvpc's SDK is not on the module proxy, and
// udp needs cgo on amd64 (flannel builds every other architecture without
// it, and so without udp). The test runs the vxlan backend.
var droppedBackends = []string{
	`_ "github.com/flannel-io/flannel/pkg/backend/tencentvpc"`,
	`_ "github.com/flannel-io/flannel/pkg/backend/udp"`,
}

// flannelBinaries returns the directory holding flanneld, install-conf and
// the flannel CNI plugin of flannelVersion, building them once into the
// user's cache (os.UserCacheDir()/cnibox-flannel/VERSION), in the host's
// namespaces: go reaches the module proxy. flanneld is built from a copy of
// the module's source without cgo and droppedBackends.
func flannelBinaries(t *testing.T) string {
	t.Helper()
	cache, err := os.UserCacheDir()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(cache, "cnibox-flannel", flannelVersion)
	if _, err := os.Stat(filepath.Join(dir, "flannel")); err == nil {
		return dir
	}
	t.Logf("building flanneld %s and the flannel CNI plugin into %s (once)", flannelVersion, dir)
	tmp := t.TempDir()
	goCmd := func(wd string, env []string, args ...string) string {
		t.Helper()
		cmd := exec.Command("go", args...)
		cmd.Dir = wd
		cmd.Env = append(os.Environ(), append([]string{"CGO_ENABLED=0", "GOFLAGS=-mod=mod", "GOWORK=off"}, env...)...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
		}
		return string(out)
	}
	var mod struct{ Dir string }
	if err := json.Unmarshal([]byte(goCmd(tmp, nil, "mod", "download", "-json", flannelModule+"@"+flannelVersion)), &mod); err != nil || mod.Dir == "" {
		t.Fatalf("go mod download %s@%s: %v", flannelModule, flannelVersion, err)
	}
	src := filepath.Join(tmp, "flannel")
	if err := os.CopyFS(src, os.DirFS(mod.Dir)); err != nil {
		t.Fatal(err)
	}
	main := filepath.Join(src, "main.go")
	data, err := os.ReadFile(main)
	if err != nil {
		t.Fatal(err)
	}
	for _, imp := range droppedBackends {
		if !bytes.Contains(data, []byte(imp)) {
			t.Fatalf("%s@%s's main.go has no line %s to drop", flannelModule, flannelVersion, imp)
		}
		data = bytes.Replace(data, []byte(imp), nil, 1)
	}
	if err := os.WriteFile(main, data, 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(tmp, "out")
	ldflags := "-s -w -X " + flannelModule + "/pkg/version.Version=" + flannelVersion
	goCmd(src, nil, "build", "-trimpath", "-ldflags", ldflags, "-o", filepath.Join(out, "flanneld"), ".")
	goCmd(src, nil, "build", "-trimpath", "-ldflags", "-s -w", "-o", filepath.Join(out, "install-conf"), "./cmd/install_conf")
	goCmd(tmp, []string{"GOBIN=" + out}, "install", "-trimpath", "-ldflags", "-s -w", flannelCNIModule)
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		t.Fatal(err)
	}
	// a rename: another run sees all of it or none of it
	if err := os.Rename(out, dir); err != nil && !os.IsExist(err) {
		if _, serr := os.Stat(filepath.Join(dir, "flannel")); serr != nil {
			t.Fatal(err)
		}
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
	var fl []imageFile
	for image, host := range map[string]string{"/opt/bin/flanneld": filepath.Join(bins, "flanneld"),
		"/opt/bin/install-conf": filepath.Join(bins, "install-conf")} {
		fl = append(fl, fileFrom(t, image, host))
	}
	for image, host := range ipt {
		fl = append(fl, fileFrom(t, image, host))
	}
	for image, target := range links {
		fl = append(fl, imageFile{path: image, link: target})
	}
	flannel := filepath.Join(dir, "flannel-image.tar")
	writeImage(t, flannel, flannelImage, []string{"/opt/bin/flanneld"}, fl)
	cni := filepath.Join(dir, "flannel-cni-image.tar")
	writeImage(t, cni, flannelCNIImage, []string{"sh"}, []imageFile{fileFrom(t, "/flannel", filepath.Join(bins, "flannel"))})
	return []string{flannel, cni}
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
			t.Fatal(fmt.Sprintf("%s is linked dynamically", path))
		}
	}
}
