package cli

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/cnibox/cnibox/roles"
)

// writeExe writes an executable file with content and returns its path.
func writeExe(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "cnibox")
	if err := os.WriteFile(p, []byte(content), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// leftovers lists the temporary files an install left in dir.
func leftovers(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.Contains(e.Name(), ".tmp") || strings.Contains(e.Name(), ".cnibox-new") {
			out = append(out, e.Name())
		}
	}
	return out
}

func TestInstall(t *testing.T) {
	dir := t.TempDir()
	bin := writeExe(t, "#!/bin/true\n")
	names := []string{"bridge", "host-local", "loopback"}
	opts := InstallOptions{Dir: dir, Binary: bin, Names: names}

	out, err := Install(opts)
	if err != nil {
		t.Fatalf("first install: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "cnibox")); err != nil || string(b) != "#!/bin/true\n" {
		t.Errorf("dir/cnibox = %q (%v), want a copy of the binary", b, err)
	}
	if fi, err := os.Lstat(filepath.Join(dir, "cnibox")); err != nil || fi.Mode().Perm() != 0o755 || !fi.Mode().IsRegular() {
		t.Errorf("dir/cnibox: %v (%v), want a regular file with mode 0755", fi.Mode(), err)
	}
	if !strings.HasPrefix(out[0], "installed") {
		t.Errorf("first install line %q, want installed", out[0])
	}
	for i, n := range names {
		if link, err := os.Readlink(filepath.Join(dir, n)); err != nil || link != "cnibox" {
			t.Errorf("%s -> %q (%v), want the relative link cnibox", n, link, err)
		}
		if !strings.HasPrefix(out[i+1], "linked") {
			t.Errorf("first install line %q, want linked", out[i+1])
		}
	}

	out, err = Install(opts)
	if err != nil {
		t.Fatalf("second install: %v", err)
	}
	for _, line := range out {
		if !strings.HasPrefix(line, "ok") {
			t.Errorf("second install line %q, want ok (idempotent)", line)
		}
	}

	// A foreign plugin binary is not replaced without --force.
	foreign := filepath.Join(dir, "bridge")
	os.Remove(foreign)
	if err := os.WriteFile(foreign, []byte("reference bridge"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := Install(opts); err == nil || !strings.Contains(err.Error(), "--force") {
		t.Errorf("install over a foreign file: err = %v, want one naming --force", err)
	}
	if b, _ := os.ReadFile(foreign); string(b) != "reference bridge" {
		t.Errorf("foreign file was changed without --force")
	}
	// --keep-foreign keeps it and succeeds: cnibox next to a primary CNI.
	opts.KeepForeign = true
	out, err = Install(opts)
	if err != nil {
		t.Errorf("install --keep-foreign over a foreign file: %v", err)
	}
	if b, _ := os.ReadFile(foreign); string(b) != "reference bridge" {
		t.Errorf("foreign file was changed with --keep-foreign")
	}
	if !slices.Contains(out, "kept      "+foreign+" (not cnibox's)") {
		t.Errorf("install --keep-foreign does not say it kept %s: %q", foreign, out)
	}
	opts.KeepForeign = false
	opts.Force = true
	if _, err := Install(opts); err != nil {
		t.Fatalf("install --force: %v", err)
	}
	if link, _ := os.Readlink(foreign); link != "cnibox" {
		t.Errorf("after --force bridge -> %q, want cnibox", link)
	}
	// A link to somewhere else is not ours either.
	opts.Force = false
	other := filepath.Join(dir, "loopback")
	os.Remove(other)
	os.Symlink("/usr/lib/cni/loopback", other)
	if _, err := Install(opts); err == nil {
		t.Errorf("install over a link to another binary succeeded without --force")
	}
	// A link an earlier install made to an absolute path is ours, and made
	// relative.
	os.Remove(other)
	os.Symlink("/usr/local/bin/cnibox", other)
	if _, err := Install(opts); err != nil {
		t.Fatalf("install over an older absolute link: %v", err)
	}
	if link, _ := os.Readlink(other); link != "cnibox" {
		t.Errorf("loopback -> %q, want cnibox", link)
	}
	if l := leftovers(t, dir); len(l) > 0 {
		t.Errorf("temporary files left in the bin dir: %v", l)
	}
}

// TestInstallOverRunningBinary: the binary in the bin dir is being
// executed (a runtime's plugin call, or the old version mid-upgrade); an
// install of a new version replaces it and the running process goes on.
// Writing into the running file is what fails with "text file busy".
func TestInstallOverRunningBinary(t *testing.T) {
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip("no sleep binary to run")
	}
	dir := t.TempDir()
	if _, err := Install(InstallOptions{Dir: dir, Binary: sleep, Names: []string{"bridge"}}); err != nil {
		t.Fatal(err)
	}
	running := exec.Command(filepath.Join(dir, "bridge"), "60")
	if err := running.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { running.Process.Kill(); running.Wait() })
	// The premise: the kernel refuses a write into the executing file.
	f, err := os.OpenFile(filepath.Join(dir, "cnibox"), os.O_WRONLY, 0)
	if err == nil {
		f.Close()
		t.Fatal("opened the running binary for writing: the premise of this test does not hold")
	}
	if !errors.Is(err, syscall.ETXTBSY) {
		t.Fatalf("open the running binary for writing: %v, want ETXTBSY", err)
	}

	newer := writeExe(t, "#!/bin/sh\necho new version\n")
	out, err := Install(InstallOptions{Dir: dir, Binary: newer, Names: []string{"bridge"}})
	if err != nil {
		t.Fatalf("install over the running binary: %v", err)
	}
	if !strings.HasPrefix(out[0], "installed") {
		t.Errorf("line %q, want installed", out[0])
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "bridge")); !bytes.Contains(b, []byte("new version")) {
		t.Errorf("bridge does not resolve to the new binary: %.40q", b)
	}
	if err := running.Process.Signal(syscall.Signal(0)); err != nil {
		t.Errorf("the old binary's process is gone: %v", err)
	}
	if l := leftovers(t, dir); len(l) > 0 {
		t.Errorf("temporary files left in the bin dir: %v", l)
	}
}

// TestInstallLinksResolveElsewhere: the links resolve when the bin dir is
// seen under another path (a DaemonSet installs into the host's
// /opt/cni/bin mounted at /host/opt/cni/bin).
func TestInstallLinksResolveElsewhere(t *testing.T) {
	root := t.TempDir()
	inContainer := filepath.Join(root, "host", "opt", "cni", "bin")
	if _, err := Install(InstallOptions{Dir: inContainer, Binary: writeExe(t, "cnibox v2"), Names: []string{"flannel", "portmap"}}); err != nil {
		t.Fatal(err)
	}
	onHost := filepath.Join(root, "opt", "cni", "bin")
	if err := os.MkdirAll(filepath.Dir(onHost), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(inContainer, onHost); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"flannel", "portmap"} {
		if b, err := os.ReadFile(filepath.Join(onHost, n)); err != nil || string(b) != "cnibox v2" {
			t.Errorf("%s seen from the host: %q (%v), want the binary", n, b, err)
		}
	}
}

// TestInstallTarget: --target links to an existing binary and copies
// nothing; the links are absolute unless the binary is in the bin dir.
func TestInstallTarget(t *testing.T) {
	dir := t.TempDir()
	target := writeExe(t, "elsewhere")
	if _, err := Install(InstallOptions{Dir: dir, Target: target, Names: []string{"bridge"}}); err != nil {
		t.Fatal(err)
	}
	if link, _ := os.Readlink(filepath.Join(dir, "bridge")); link != target {
		t.Errorf("bridge -> %q, want %s", link, target)
	}
	if _, err := os.Lstat(filepath.Join(dir, "cnibox")); err == nil {
		t.Error("--target copied a binary into the bin dir")
	}
	inDir := filepath.Join(dir, "cnibox")
	if err := os.WriteFile(inDir, []byte("here"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := Install(InstallOptions{Dir: dir, Target: inDir, Names: []string{"bridge"}}); err != nil {
		t.Fatal(err)
	}
	if link, _ := os.Readlink(filepath.Join(dir, "bridge")); link != "cnibox" {
		t.Errorf("bridge -> %q, want cnibox", link)
	}
}

func TestInstallConflist(t *testing.T) {
	src := filepath.Join(t.TempDir(), "cni-conf.json")
	good := `{"cniVersion":"1.0.0","name":"cbr0","plugins":[{"type":"flannel"},{"type":"portmap"}]}`
	if err := os.WriteFile(src, []byte(good), 0o600); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "net.d")
	dst := filepath.Join(dir, "10-cnibox.conflist")

	line, err := InstallConflist(src, dir, "10-cnibox.conflist")
	if err != nil || !strings.HasPrefix(line, "installed") {
		t.Fatalf("install: %q, %v", line, err)
	}
	fi, err := os.Stat(dst)
	if err != nil || fi.Mode().Perm() != 0o644 {
		t.Fatalf("installed conflist: %v (%v), want mode 0644", fi, err)
	}
	if b, _ := os.ReadFile(dst); string(b) != good {
		t.Errorf("installed conflist = %s", b)
	}
	// Unchanged: left alone (a runtime watching the dir sees no event).
	if line, err := InstallConflist(src, dir, "10-cnibox.conflist"); err != nil || !strings.HasPrefix(line, "ok") {
		t.Errorf("second install: %q, %v; want ok", line, err)
	}
	if fi2, _ := os.Stat(dst); !os.SameFile(fi, fi2) {
		t.Error("an unchanged conflist was rewritten")
	}
	// Changed: a new file renamed over the old; a reader holding the old
	// one still reads it whole.
	old, err := os.Open(dst)
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	changed := strings.Replace(good, "cbr0", "cbr1", 1)
	os.WriteFile(src, []byte(changed), 0o600)
	if line, err := InstallConflist(src, dir, "10-cnibox.conflist"); err != nil || !strings.HasPrefix(line, "installed") {
		t.Errorf("changed install: %q, %v", line, err)
	}
	if b, _ := os.ReadFile(dst); string(b) != changed {
		t.Errorf("conflist after the change = %s", b)
	}
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(old); err != nil || buf.String() != good {
		t.Errorf("a reader of the old conflist read %q (%v)", buf.String(), err)
	}

	// Refused: a file that is not a list, or a name runtimes do not read as
	// a list. The installed file stays.
	for _, c := range []struct{ content, name, want string }{
		{`{"cniVersion":"1.0.0","name":"x","type":"bridge"}`, "10-cnibox.conflist", "plugins"},
		{`{"name":"x","plugins":[{"type":""}]}`, "10-cnibox.conflist", "type"},
		{`{"plugins":[{"type":"flannel"}]}`, "10-cnibox.conflist", "name"},
		{`not json`, "10-cnibox.conflist", "JSON"},
		{good, "10-cnibox.conf", ".conflist"},
	} {
		os.WriteFile(src, []byte(c.content), 0o600)
		if _, err := InstallConflist(src, dir, c.name); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("install %s as %s: err %v, want one about %s", c.content, c.name, err, c.want)
		}
	}
	if b, _ := os.ReadFile(dst); string(b) != changed {
		t.Errorf("a refused install changed the conflist: %s", b)
	}
	if l := leftovers(t, dir); len(l) > 0 {
		t.Errorf("temporary files left in the conf dir: %v", l)
	}
}

// TestInstallCommand: the flags as a DaemonSet's init container gives
// them.
func TestInstallCommand(t *testing.T) {
	root := t.TempDir()
	conf := filepath.Join(root, "cni-conf.json")
	os.WriteFile(conf, []byte(`{"cniVersion":"1.0.0","name":"cbr0","plugins":[{"type":"flannel"}]}`), 0o644)
	bin := writeExe(t, "cnibox")
	var out bytes.Buffer
	app := newApp(Options{Registry: roles.Registry()})
	app.Writer = &out
	err := app.Run([]string{"cnibox", "install", "--dir", filepath.Join(root, "bin"), "--binary", bin,
		"--conflist", conf, "--conf-dir", filepath.Join(root, "net.d"), "--conf-name", "10-cnibox.conflist"})
	if err != nil {
		t.Fatalf("install: %v\n%s", err, out.String())
	}
	for _, p := range []string{"bin/cnibox", "net.d/10-cnibox.conflist"} {
		if _, err := os.Stat(filepath.Join(root, p)); err != nil {
			t.Errorf("%s: %v\n%s", p, err, out.String())
		}
	}
	err = app.Run([]string{"cnibox", "install", "--dir", filepath.Join(root, "bin"), "--binary", bin, "--target", bin})
	if err == nil || !strings.Contains(err.Error(), "one of them") {
		t.Errorf("--binary with --target: %v, want a refusal", err)
	}
}

// TestInstallDHCPDaemon: the dhcp daemon's binary next to the one copied is
// copied too (`dhcp daemon` looks for it next to cnibox: the role declares
// it, cniplug.Known.Companions); twice is ok.
func TestInstallDHCPDaemon(t *testing.T) {
	dir := t.TempDir()
	bin := writeExe(t, "#!/bin/true\n")
	if err := os.WriteFile(filepath.Join(filepath.Dir(bin), "cnibox-dhcp"), []byte("daemon"), 0o755); err != nil {
		t.Fatal(err)
	}
	opts := InstallOptions{Dir: dir, Binary: bin, Names: []string{"dhcp"}, Companions: roles.Registry().Companions()}
	out, err := Install(opts)
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "cnibox-dhcp")); err != nil || string(b) != "daemon" {
		t.Errorf("dir/cnibox-dhcp = %q (%v), want a copy; lines %q", b, err, out)
	}
	if out, err = Install(opts); err != nil || len(out) != 3 || !strings.HasPrefix(out[1], "ok") {
		t.Errorf("second install: %q, %v", out, err)
	}
}
