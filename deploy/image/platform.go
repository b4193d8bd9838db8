package main

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// platform is one -platform OS/ARCH[/VARIANT]=DIR: the image for that
// platform holds every file of DIR but busybox in /usr/local/bin, and
// DIR/busybox, when there, as /bin/busybox with flannel's paths
// (flannel.go). Each of them must be an executable for ARCH: a directory
// built for another architecture is refused, not shipped under this one's
// name.
type platform struct {
	os, arch, variant, dir string
}

func (p platform) String() string { return path.Join(p.os, p.arch, p.variant) }

// elfMachines is the ELF machine and byte order of each Go architecture
// the image is built for.
var elfMachines = map[string]struct {
	machine elf.Machine
	order   binary.ByteOrder
}{
	"amd64":   {elf.EM_X86_64, binary.LittleEndian},
	"arm64":   {elf.EM_AARCH64, binary.LittleEndian},
	"arm":     {elf.EM_ARM, binary.LittleEndian},
	"ppc64le": {elf.EM_PPC64, binary.LittleEndian},
	"s390x":   {elf.EM_S390, binary.BigEndian},
	"riscv64": {elf.EM_RISCV, binary.LittleEndian},
	"386":     {elf.EM_386, binary.LittleEndian},
}

// parsePlatform parses OS/ARCH[/VARIANT]=DIR.
func parsePlatform(s string) (platform, error) {
	spec, dir, ok := strings.Cut(s, "=")
	parts := strings.Split(spec, "/")
	if !ok || dir == "" || len(parts) < 2 || len(parts) > 3 || parts[0] == "" || parts[1] == "" {
		return platform{}, fmt.Errorf("-platform %q: give OS/ARCH[/VARIANT]=DIR, e.g. linux/arm64=bin/linux-arm64", s)
	}
	p := platform{os: parts[0], arch: parts[1], dir: dir}
	if len(parts) == 3 {
		p.variant = parts[2]
	}
	if _, known := elfMachines[p.arch]; !known || p.os != "linux" {
		return platform{}, fmt.Errorf("-platform %q: %s is not a platform the image is built for (linux and one of %s)", s, spec, strings.Join(slices.Sorted(maps.Keys(elfMachines)), ", "))
	}
	return p, nil
}

// platformImage is the image -platform spec names, as ref, created then.
func platformImage(spec, ref string, created time.Time) (Image, error) {
	p, err := parsePlatform(spec)
	if err != nil {
		return Image{}, err
	}
	files, err := p.files()
	return Image{Ref: ref, Created: created, OS: p.os, Arch: p.arch, Variant: p.variant, Config: imageConfig(ref), Files: files}, err
}

// files reads the platform's directory: the binaries for /usr/local/bin,
// then busybox and flannel's paths when DIR/busybox is there.
func (p platform) files() ([]File, error) {
	entries, err := os.ReadDir(p.dir)
	if err != nil {
		return nil, fmt.Errorf("-platform %s: %w", p, err)
	}
	var files []File
	bins := map[string]bool{}
	hasBusybox := false
	for _, e := range entries {
		if e.Name() == "busybox" {
			hasBusybox = true
			continue
		}
		if !e.Type().IsRegular() {
			continue
		}
		data, err := p.executable(e.Name())
		if err != nil {
			return nil, err
		}
		files = append(files, File{Path: path.Join(binDir, e.Name()), Mode: 0o755, Data: data})
		bins[e.Name()] = true
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("-platform %s: %s holds no binary", p, p.dir)
	}
	if !hasBusybox {
		return files, nil
	}
	if _, err := p.executable("busybox"); err != nil {
		return nil, err
	}
	bb, err := busyboxFiles(filepath.Join(p.dir, "busybox"))
	if err != nil {
		return nil, err
	}
	fl, err := flannelFiles(bins)
	if err != nil {
		return nil, err
	}
	return append(append(files, bb...), fl...), nil
}

// executable reads DIR/name and checks that it is an ELF executable for
// the platform's architecture.
func (p platform) executable(name string) ([]byte, error) {
	file := filepath.Join(p.dir, name)
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("-platform %s: %w", p, err)
	}
	f, err := elf.NewFile(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("-platform %s: %s is not an executable: %w", p, file, err)
	}
	want := elfMachines[p.arch]
	if f.Machine != want.machine || f.ByteOrder != want.order || f.Type != elf.ET_EXEC && f.Type != elf.ET_DYN {
		return nil, fmt.Errorf("-platform %s: %s is an executable for %s (%s), not for %s: build it with GOARCH=%s", p, file, f.Machine, f.ByteOrder, p.arch, p.arch)
	}
	return data, nil
}
