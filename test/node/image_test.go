//go:build kube

package node

import (
	"archive/tar"
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path"
	"runtime"
	"sort"
	"strings"
	"testing"
)

// busyboxBin is Debian's busybox-static.
const busyboxBin = "/bin/busybox"

// imageFile is one entry of a test image's layer: a file, or with link
// set, a symbolic link.
type imageFile struct {
	path string // absolute, as the container sees it
	data []byte
	mode int64
	link string
}

// writeBusyboxImage writes the test's pod image: busybox alone. Its default
// command sleeps, so it also serves as the pod sandbox ("pause") image.
func writeBusyboxImage(t *testing.T, path, ref string) {
	t.Helper()
	writeImage(t, path, ref, []string{"sleep", "2147483647"}, nil)
}

// writeImage writes a docker-archive (what `ctr images import` takes, as
// it takes make image's archive) of one layer: busyboxBin as /bin/busybox
// with a link to it for each of its applets (a command runs under its own
// name: killall finds ping), and files. PATH is /usr/sbin:/bin; cmd is the
// default command.
func writeImage(t *testing.T, archive, ref string, cmd []string, files []imageFile) {
	t.Helper()
	writeImageSpec(t, archive, imageSpec{refs: []string{ref}, cmd: cmd, files: files})
}

// imageSpec is what writeImageSpec writes: the image's names, its
// entrypoint and default command, its PATH (default /usr/sbin:/bin) and the
// files over busybox's.
type imageSpec struct {
	refs            []string
	entrypoint, cmd []string
	path            string
	files           []imageFile
}

// writeImageSpec is writeImage with an entrypoint, a PATH and several names.
func writeImageSpec(t *testing.T, archive string, spec imageSpec) {
	t.Helper()
	files := spec.files
	checkStatic(t, busyboxBin)
	bb, err := os.ReadFile(busyboxBin)
	if err != nil {
		t.Fatalf("read %s: %v (apt-get install busybox-static)", busyboxBin, err)
	}
	out, err := exec.Command(busyboxBin, "--list").Output()
	if err != nil {
		t.Fatalf("%s --list: %v", busyboxBin, err)
	}
	all := map[string]imageFile{"/bin/busybox": {path: "/bin/busybox", data: bb, mode: 0o755}}
	for _, applet := range strings.Fields(string(out)) {
		if applet != "busybox" && !strings.Contains(applet, "/") {
			all["/bin/"+applet] = imageFile{path: "/bin/" + applet, link: "busybox"}
		}
	}
	for _, f := range files {
		all[f.path] = f
	}
	// every parent directory, then the entries in name order
	dirs := map[string]bool{}
	for p := range all {
		for d := path.Dir(p); d != "/"; d = path.Dir(d) {
			dirs[d] = true
		}
	}
	names := make([]string, 0, len(all)+len(dirs))
	for p := range all {
		names = append(names, p)
	}
	for d := range dirs {
		names = append(names, d)
	}
	sort.Strings(names)

	var layer bytes.Buffer
	tw := tar.NewWriter(&layer)
	for _, n := range names {
		h := &tar.Header{Name: strings.TrimPrefix(n, "/"), Uname: "root", Gname: "root"}
		f, isFile := all[n]
		switch {
		case !isFile:
			h.Name, h.Typeflag, h.Mode = h.Name+"/", tar.TypeDir, 0o755
		case f.link != "":
			h.Typeflag, h.Linkname, h.Mode = tar.TypeSymlink, f.link, 0o777
		default:
			h.Typeflag, h.Mode, h.Size = tar.TypeReg, f.mode, int64(len(f.data))
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := tw.Write(f.data); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(layer.Bytes())
	config, err := json.Marshal(map[string]any{
		"architecture": runtime.GOARCH,
		"os":           "linux",
		"config": map[string]any{
			"Env":        []string{"PATH=" + cmp.Or(spec.path, "/usr/sbin:/bin")},
			"Entrypoint": spec.entrypoint,
			"Cmd":        spec.cmd,
		},
		"rootfs": map[string]any{"type": "layers", "diff_ids": []string{"sha256:" + hex.EncodeToString(sum[:])}},
	})
	if err != nil {
		t.Fatal(err)
	}
	manifest, err := json.Marshal([]map[string]any{{"Config": "config.json", "RepoTags": spec.refs, "Layers": []string{"layer.tar"}}})
	if err != nil {
		t.Fatal(err)
	}

	var buf bytes.Buffer
	aw := tar.NewWriter(&buf)
	for _, f := range []struct {
		name string
		data []byte
	}{{"config.json", config}, {"layer.tar", layer.Bytes()}, {"manifest.json", manifest}} {
		if err := aw.WriteHeader(&tar.Header{Name: f.name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(f.data))}); err != nil {
			t.Fatal(err)
		}
		if _, err := aw.Write(f.data); err != nil {
			t.Fatal(err)
		}
	}
	if err := aw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(archive, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}
