package main

import (
	"bytes"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestBusyboxPin: make image puts into each platform's image Debian's
// busybox-static for that architecture at the version the Makefile pins
// (BUSYBOX_DEB), fetched through apt by deploy/image/busybox.sh: for
// amd64 the very file the package installs as /bin/busybox, for arm64 a
// static aarch64 executable; a version the archive lacks stops it, naming
// the pin.
func TestBusyboxPin(t *testing.T) {
	if testing.Short() {
		t.Skip("fetches Debian's packages (once, cached)")
	}
	for _, tool := range []string{"apt-get", "dpkg-deb"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("not a Debian system: no %s", tool)
		}
	}
	mk, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^image-bins:.*\bbusybox\b`).Match(mk) ||
		!strings.Contains(string(mk), "bash deploy/image/busybox.sh '$(BUSYBOX_DEB)' bin $(IMAGE_ARCHES)") {
		t.Fatal("make image does not fetch busybox-static=$(BUSYBOX_DEB) for $(IMAGE_ARCHES) with deploy/image/busybox.sh")
	}
	pin := regexp.MustCompile(`(?m)^BUSYBOX_DEB\s*\?=\s*(\S+)$`).FindSubmatch(mk)
	if pin == nil {
		t.Fatal("no BUSYBOX_DEB ?= in the Makefile")
	}
	out := t.TempDir()
	if msg, err := exec.Command("bash", "busybox.sh", string(pin[1]), out, "amd64", "arm64").CombinedOutput(); err != nil {
		t.Fatalf("busybox.sh %s: %v\n%s", pin[1], err, msg)
	}
	for arch, machine := range map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64} {
		f, err := elf.Open(filepath.Join(out, "linux-"+arch, "busybox"))
		if err != nil {
			t.Fatalf("%s's busybox: %v", arch, err)
		}
		if f.Machine != machine {
			t.Errorf("%s's busybox is for %s", arch, f.Machine)
		}
		for _, p := range f.Progs {
			if p.Type == elf.PT_INTERP {
				t.Errorf("%s's busybox is linked dynamically", arch)
			}
		}
		f.Close()
	}
	installed, _ := exec.Command("dpkg-query", "-W", "-f=${Version}", "busybox-static").Output()
	if string(installed) == string(pin[1]) {
		got, _ := os.ReadFile(filepath.Join(out, "linux-amd64", "busybox"))
		want, err := os.ReadFile("/bin/busybox")
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("busybox.sh's amd64 busybox %s is not the installed busybox-static %s's /bin/busybox (%v)", pin[1], installed, err)
		}
	}
	msg, err := exec.Command("bash", "busybox.sh", "1:0.0-other", out, "amd64").CombinedOutput()
	if err == nil || !strings.Contains(string(msg), "pins busybox-static 1:0.0-other (BUSYBOX_DEB in the Makefile)") {
		t.Errorf("busybox.sh with a version the archive lacks: %v %s, want it to stop naming the pin", err, msg)
	}
}
