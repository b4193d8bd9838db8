package main

import (
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

// TestBusyboxPin: make image builds the image with Debian's busybox-static
// at the version the Makefile pins (BUSYBOX_DEB), installs that version
// when none is, and stops on another version.
func TestBusyboxPin(t *testing.T) {
	if _, err := exec.LookPath("dpkg-query"); err != nil {
		t.Skip("not a Debian system: the pin is checked with dpkg")
	}
	mk, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^image:.*\bbusybox\b`).Match(mk) || !strings.Contains(string(mk), `apt-get install -y -qq "busybox-static=$(BUSYBOX_DEB)"`) ||
		!strings.Contains(string(mk), "-busybox /bin/busybox") {
		t.Fatal("make image does not build on the busybox target, or it does not install busybox-static=$(BUSYBOX_DEB) into /bin/busybox")
	}
	pin := regexp.MustCompile(`(?m)^BUSYBOX_DEB\s*\?=\s*(\S+)$`).FindSubmatch(mk)
	if pin == nil {
		t.Fatal("no BUSYBOX_DEB ?= in the Makefile")
	}
	installed, _ := exec.Command("dpkg-query", "-W", "-f=${Version}", "busybox-static").Output()
	if string(installed) != string(pin[1]) {
		t.Skipf("busybox-static %q is installed, the Makefile pins %s (make image would stop)", installed, pin[1])
	}
	if out, err := exec.Command("make", "-s", "-C", "../..", "busybox").CombinedOutput(); err != nil {
		t.Errorf("make busybox with the pinned version installed: %v\n%s", err, out)
	}
	out, err := exec.Command("make", "-s", "-C", "../..", "busybox", "BUSYBOX_DEB=1:0.0-other").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "the image pins 1:0.0-other") {
		t.Errorf("make busybox with another version pinned than installed: %v %s, want it to stop naming the version", err, out)
	}
}
