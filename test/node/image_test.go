//go:build kube

package node

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
)

// busyboxBin is Debian's busybox-static.
const busyboxBin = "/bin/busybox"

// writeBusyboxImage writes a docker-archive (what `ctr images import`
// takes, as it takes make image's archive) of one layer: busyboxBin as
// /bin/busybox and a link to it for each of its applets, so that a command
// runs under its own name (killall finds ping). The default command sleeps,
// so the image also serves as the pod sandbox ("pause") image.
func writeBusyboxImage(t *testing.T, path, ref string) {
	t.Helper()
	bb, err := os.ReadFile(busyboxBin)
	if err != nil {
		t.Fatalf("read %s: %v (apt-get install busybox-static)", busyboxBin, err)
	}
	if f, err := elf.NewFile(bytes.NewReader(bb)); err != nil {
		t.Fatalf("%s: %v", busyboxBin, err)
	} else {
		for _, p := range f.Progs {
			if p.Type == elf.PT_INTERP {
				t.Fatalf("%s is linked dynamically: the image holds nothing else (apt-get install busybox-static)", busyboxBin)
			}
		}
	}
	out, err := exec.Command(busyboxBin, "--list").Output()
	if err != nil {
		t.Fatalf("%s --list: %v", busyboxBin, err)
	}

	var layer bytes.Buffer
	tw := tar.NewWriter(&layer)
	add := func(h *tar.Header, data []byte) {
		h.Uname, h.Gname = "root", "root"
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(data); err != nil {
			t.Fatal(err)
		}
	}
	add(&tar.Header{Name: "bin/", Typeflag: tar.TypeDir, Mode: 0o755}, nil)
	add(&tar.Header{Name: "bin/busybox", Typeflag: tar.TypeReg, Mode: 0o755, Size: int64(len(bb))}, bb)
	for _, applet := range strings.Fields(string(out)) {
		if applet != "busybox" && !strings.Contains(applet, "/") {
			add(&tar.Header{Name: "bin/" + applet, Typeflag: tar.TypeSymlink, Linkname: "busybox", Mode: 0o777}, nil)
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
			"Env": []string{"PATH=/bin"},
			"Cmd": []string{"sleep", "2147483647"},
		},
		"rootfs": map[string]any{"type": "layers", "diff_ids": []string{"sha256:" + hex.EncodeToString(sum[:])}},
	})
	if err != nil {
		t.Fatal(err)
	}
	manifest, err := json.Marshal([]map[string]any{{"Config": "config.json", "RepoTags": []string{ref}, "Layers": []string{"layer.tar"}}})
	if err != nil {
		t.Fatal(err)
	}

	var archive bytes.Buffer
	aw := tar.NewWriter(&archive)
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
	if err := os.WriteFile(path, archive.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}
