package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"debug/elf"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// fakeELF is an ELF header for arch (a static executable as debug/elf
// reads it: no program or section headers) followed by payload.
func fakeELF(t *testing.T, arch, payload string) []byte {
	t.Helper()
	m, ok := elfMachines[arch]
	if !ok {
		t.Fatalf("no ELF machine for %s", arch)
	}
	data := byte(elf.ELFDATA2LSB)
	if m.order == binary.BigEndian {
		data = byte(elf.ELFDATA2MSB)
	}
	var buf bytes.Buffer
	var err error
	if arch == "arm" || arch == "386" {
		ident := [16]byte{0x7f, 'E', 'L', 'F', byte(elf.ELFCLASS32), data, 1}
		err = binary.Write(&buf, m.order, elf.Header32{Ident: ident, Type: uint16(elf.ET_EXEC), Machine: uint16(m.machine), Version: 1, Ehsize: 52})
	} else {
		ident := [16]byte{0x7f, 'E', 'L', 'F', byte(elf.ELFCLASS64), data, 1}
		err = binary.Write(&buf, m.order, elf.Header64{Ident: ident, Type: uint16(elf.ET_EXEC), Machine: uint16(m.machine), Version: 1, Ehsize: 64})
	}
	if err != nil {
		t.Fatal(err)
	}
	buf.WriteString(payload)
	return buf.Bytes()
}

// platformDir writes a -platform directory for arch: cnibox,
// cnibox-agent-kube and busybox, ELF executables for elfArch holding
// "NAME for arch".
func platformDir(t *testing.T, root, arch, elfArch string) string {
	t.Helper()
	dir := filepath.Join(root, "linux-"+arch)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"cnibox", "cnibox-agent-kube", "busybox"} {
		if err := os.WriteFile(filepath.Join(dir, name), fakeELF(t, elfArch, name+" for "+arch), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// buildPlatforms runs image with -platform for each of specs (OS/ARCH
// [/VARIANT]=DIR) into archive and returns what it printed.
func buildPlatforms(t *testing.T, archive string, specs ...string) (string, error) {
	t.Helper()
	args := []string{"-o", archive, "-ref", "ghcr.io/cnibox/cnibox:v5", "-epoch", "1700000000"}
	for _, s := range specs {
		args = append(args, "-platform", s)
	}
	var stdout bytes.Buffer
	err := run(args, &stdout, io.Discard)
	return stdout.String(), err
}

// TestPlatforms: -platform builds one image index of the platforms given,
// in their order (amd64, arm64, arm/v7), each image holding its own
// directory's binaries and busybox with flannel's paths; the same inputs
// give the same bytes and digests, a changed arm64 binary changes arm64's
// manifest and the index but not amd64's manifest.
func TestPlatforms(t *testing.T) {
	root := t.TempDir()
	specs := []string{
		"linux/amd64=" + platformDir(t, root, "amd64", "amd64"),
		"linux/arm64=" + platformDir(t, root, "arm64", "arm64"),
		"linux/arm/v7=" + platformDir(t, root, "arm", "arm"),
	}
	a, b := filepath.Join(root, "a.tar"), filepath.Join(root, "b.tar")
	outA, err := buildPlatforms(t, a, specs...)
	if err != nil {
		t.Fatal(err)
	}
	outB, err := buildPlatforms(t, b, specs...)
	if err != nil {
		t.Fatal(err)
	}
	t.Log(outA)
	dataA, _ := os.ReadFile(a)
	dataB, _ := os.ReadFile(b)
	if outA != strings.ReplaceAll(outB, b, a) || !bytes.Equal(dataA, dataB) {
		t.Errorf("two builds of the same inputs differ:\n%s\n%s", outA, outB)
	}
	w := archiveWritten(t, a)
	if !strings.Contains(outA, "(index "+w.Index.String()+")") {
		t.Errorf("image printed %q, want the index %s", outA, w.Index)
	}
	_, files := untar(t, bytes.NewReader(dataA), time.Unix(1700000000, 0).UTC())
	want := []ocispec.Platform{{OS: "linux", Architecture: "amd64"}, {OS: "linux", Architecture: "arm64"}, {OS: "linux", Architecture: "arm", Variant: "v7"}}
	if len(w.Manifests) != len(want) {
		t.Fatalf("the index names %d images, want %d", len(w.Manifests), len(want))
	}
	for i, md := range w.Manifests {
		if md.Platform == nil || md.Platform.OS != want[i].OS || md.Platform.Architecture != want[i].Architecture || md.Platform.Variant != want[i].Variant {
			t.Errorf("index entry %d: platform %+v, want %+v", i, md.Platform, want[i])
			continue
		}
		arch := want[i].Architecture
		var man ocispec.Manifest
		if err := json.Unmarshal(blobOf(t, files, md), &man); err != nil {
			t.Fatal(err)
		}
		var cfg ocispec.Image
		if err := json.Unmarshal(blobOf(t, files, man.Config), &cfg); err != nil || cfg.Architecture != arch || cfg.Variant != want[i].Variant {
			t.Errorf("%s's config: %+v %v", arch, cfg.Platform, err)
		}
		layer := layerFiles(t, blobOf(t, files, man.Layers[0]))
		for name, p := range map[string]string{"cnibox": "usr/local/bin/cnibox", "cnibox-agent-kube": "usr/local/bin/cnibox-agent-kube", "busybox": "bin/busybox"} {
			if got := string(layer[p]); !strings.HasSuffix(got, name+" for "+arch) {
				t.Errorf("%s's /%s holds %q, want %s's %s", arch, p, got, arch, name)
			}
		}
		if string(layer["flannel"]) != string(layer["usr/local/bin/cnibox"]) || layer["bin/sh"] == nil {
			t.Errorf("%s: /flannel is not cnibox, or /bin/sh is missing", arch)
		}
	}

	// one binary changed: its platform's image and the index change
	if err := os.WriteFile(filepath.Join(root, "linux-arm64", "cnibox"), fakeELF(t, "arm64", "cnibox v2 for arm64"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := buildPlatforms(t, b, specs...); err != nil {
		t.Fatal(err)
	}
	w2 := archiveWritten(t, b)
	if w2.Index == w.Index || w2.Manifests[1].Digest == w.Manifests[1].Digest || w2.Manifests[0].Digest != w.Manifests[0].Digest {
		t.Errorf("arm64's cnibox changed: index %s -> %s, arm64 %s -> %s, amd64 %s -> %s (want the first two changed, amd64 not)",
			w.Index, w2.Index, w.Manifests[1].Digest, w2.Manifests[1].Digest, w.Manifests[0].Digest, w2.Manifests[0].Digest)
	}
}

// layerFiles is a gzipped layer's files by path (tarFiles').
func layerFiles(t *testing.T, gz []byte) map[string][]byte {
	t.Helper()
	return tarFiles(t, gunzip(t, gz))
}

// tarFiles is a tar stream's files by path: regular files and hard links
// by their data, symlinks as "-> TARGET".
func tarFiles(t *testing.T, r io.Reader) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		switch h.Typeflag {
		case tar.TypeReg:
			if files[h.Name], err = io.ReadAll(tr); err != nil {
				t.Fatal(err)
			}
		case tar.TypeLink:
			files[h.Name] = files[h.Linkname] // a hard link follows its target
		case tar.TypeSymlink:
			files[h.Name] = []byte("-> " + h.Linkname)
		}
	}
}

// gunzip is a reader of the gzipped data.
func gunzip(t *testing.T, gz []byte) io.Reader {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		t.Fatal(err)
	}
	return zr
}

// TestPlatformRefusals: a directory built for another architecture, a
// platform the image is not built for, -platform with BINARY arguments,
// and one platform twice are refused, naming what to do.
func TestPlatformRefusals(t *testing.T) {
	root := t.TempDir()
	amd := platformDir(t, root, "amd64", "amd64")
	wrong := platformDir(t, root, "s390x", "amd64") // amd64 binaries in s390x's place
	arch := filepath.Join(root, "x.tar")
	for _, c := range []struct {
		specs []string
		want  string
	}{
		{[]string{"linux/amd64=" + amd, "linux/s390x=" + wrong}, "not for s390x: build it with GOARCH=s390x"},
		{[]string{"linux/mips=" + amd}, "not a platform the image is built for"},
		{[]string{"windows/amd64=" + amd}, "not a platform the image is built for"},
		{[]string{"linux=" + amd}, "give OS/ARCH[/VARIANT]=DIR"},
		{[]string{"linux/amd64"}, "give OS/ARCH[/VARIANT]=DIR"},
		{[]string{"linux/amd64=" + amd, "linux/amd64=" + amd}, "two images for linux/amd64"},
		{[]string{"linux/amd64=" + filepath.Join(root, "none")}, "no such file"},
	} {
		if _, err := buildPlatforms(t, arch, c.specs...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("-platform %v: %v, want an error saying %q", c.specs, err, c.want)
		}
	}
	err := run([]string{"-o", arch, "-ref", "ghcr.io/cnibox/cnibox:v5", "-platform", "linux/amd64=" + amd, filepath.Join(amd, "cnibox")}, io.Discard, io.Discard)
	if err == nil || !regexp.MustCompile(`give no BINARY arguments`).MatchString(err.Error()) {
		t.Errorf("-platform with a BINARY argument: %v", err)
	}
	if _, err := os.Stat(arch); err == nil {
		t.Errorf("a refused build wrote %s", arch)
	}
}
