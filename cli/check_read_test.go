package cli

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/roles"
)

// hostileConfDir is a conf dir with, beside a good conflist and one that is
// a symlink to a good file elsewhere (both fine), a symlink to /dev/zero, a
// FIFO without a writer, a file one byte over the plugins' limit, and a
// conflist whose drop-in is a FIFO: the files that ran `cnibox check` out
// of memory or hung it (issue 60). It returns the dir and the bad files
// (what each finding must say).
func hostileConfDir(t *testing.T) (string, map[string]string) {
	t.Helper()
	dir := t.TempDir()
	at := func(name string) string { return filepath.Join(dir, name) }
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	list := func(name string) []byte {
		return []byte(`{"cniVersion":"1.0.0","name":"` + name + `","plugins":[{"type":"loopback"}]}`)
	}
	must(os.WriteFile(at("10-good.conflist"), list("good"), 0o644))
	elsewhere := filepath.Join(t.TempDir(), "linked.conflist")
	must(os.WriteFile(elsewhere, list("linked"), 0o644))
	must(os.Symlink(elsewhere, at("11-linked.conflist")))
	must(os.Symlink("/dev/zero", at("20-zero.conflist")))
	must(syscall.Mkfifo(at("30-fifo.conflist"), 0o644))
	must(os.WriteFile(at("40-big.conflist"), []byte(`{"name":"big","plugins":[],"pad":"`+strings.Repeat("x", cniplug.MaxConfigBytes)+`"}`), 0o644))
	must(os.WriteFile(at("50-dropin.conflist"), list("dropin"), 0o644))
	must(os.Mkdir(at("dropin"), 0o755))
	must(syscall.Mkfifo(at("dropin/10-fifo.conf"), 0o644))
	return dir, map[string]string{
		at("20-zero.conflist"):   at("20-zero.conflist") + ": not a regular file: a character device",
		at("30-fifo.conflist"):   at("30-fifo.conflist") + ": not a regular file: a named pipe (FIFO)",
		at("40-big.conflist"):    at("40-big.conflist") + ": file too large: larger than",
		at("50-dropin.conflist"): at("dropin/10-fifo.conf") + ": not a regular file: a named pipe (FIFO)",
	}
}

// within runs f and fails t if it has not returned after a minute: a read
// of a FIFO without a writer never returns.
func within(t *testing.T, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatalf("%s has not returned after a minute (a read without end, or a wait for a FIFO's writer)", what)
	}
}

// TestCheckHostileFiles: `cnibox check` (and doctor's check of the conf
// dir, the same code) of the hostile conf dir reports each bad file as an
// error naming it and why, and the good and symlinked ones as fine; it
// neither hangs nor reads without end. As a normal user.
func TestCheckHostileFiles(t *testing.T) {
	dir, bad := hostileConfDir(t)
	ck := checker{reg: roles.Registry(), binDirs: []string{checkBinDir(t)}}
	var rep checkReport
	within(t, "check of the conf dir", func() { rep = ck.paths([]string{dir}) })
	for _, f := range rep.Files {
		says, isBad := bad[f.File]
		if !isBad {
			if len(f.Findings) != 0 {
				t.Errorf("%s: findings %+v; want none", f.File, f.Findings)
			}
			continue
		}
		delete(bad, f.File)
		if len(f.Findings) != 1 || f.Findings[0].Severity != sevError || !strings.Contains(f.Findings[0].Message, says) || f.Findings[0].Fix == "" {
			t.Errorf("%s: findings %+v; want one error saying %q, with a fix", f.File, f.Findings, says)
		}
	}
	for f := range bad {
		t.Errorf("%s: not in the report", f)
	}
	// The command line, each file named.
	var code int
	var out string
	within(t, "cnibox check", func() { code, out = runCheckCLI(t, checkBinDir(t), dir) })
	if code != 1 || !strings.Contains(out, "20-zero.conflist") || !strings.Contains(out, "dropin/10-fifo.conf") {
		t.Errorf("cnibox check: exit %d; want 1 naming each file:\n%s", code, out)
	}
}

// TestDoctorConfigHostileFiles: doctor's view of the conf dir (which
// network a runtime picks, inspectConfig over nodestate.LoadConfFile) says
// why each bad file cannot be loaded, and picks the good one.
func TestDoctorConfigHostileFiles(t *testing.T) {
	dir, bad := hostileConfDir(t)
	var rep configReport
	within(t, "doctor's config report", func() { rep = inspectConfig(context.Background(), dir, checkBinDir(t)) })
	for _, f := range rep.Files {
		if says, ok := bad[f.File]; ok {
			delete(bad, f.File)
			if !strings.Contains(f.Error, says) {
				t.Errorf("%s: error %q; want it to say %q", f.File, f.Error, says)
			}
		} else if f.Error != "" {
			t.Errorf("%s: error %q; want none", f.File, f.Error)
		}
	}
	for f := range bad {
		t.Errorf("%s: not in the report", f)
	}
	if rep.Active == nil || rep.Active.Network != "good" {
		t.Errorf("active network %+v; want good", rep.Active)
	}
}

// TestInstallConflistHostileFiles: `cnibox install --conflist` of each bad
// file is refused naming it, nothing installed.
func TestInstallConflistHostileFiles(t *testing.T) {
	dir, bad := hostileConfDir(t)
	delete(bad, filepath.Join(dir, "50-dropin.conflist")) // drop-ins are the conf dir's, not the source's
	root := t.TempDir()
	bin := writeExe(t, "cnibox")
	for src, says := range bad {
		app := newApp(Options{Registry: roles.Registry()})
		var err error
		within(t, "install of "+src, func() {
			err = app.Run([]string{"cnibox", "install", "--dir", filepath.Join(root, "bin"), "--binary", bin,
				"--conflist", src, "--conf-dir", filepath.Join(root, "net.d"), "--conf-name", "10-cnibox.conflist"})
		})
		if err == nil || !strings.Contains(err.Error(), says) {
			t.Errorf("install --conflist %s: %v; want an error saying %q", src, err, says)
		}
		if _, err := os.Stat(filepath.Join(root, "net.d", "10-cnibox.conflist")); err == nil {
			t.Errorf("install --conflist %s installed a conflist", src)
		}
	}
}
