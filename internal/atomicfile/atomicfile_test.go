package atomicfile

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// crashEnv makes the re-executed test binary a writer that dies by SIGKILL
// between the write and the rename (TestCrashBeforeRename).
const crashEnv = "ATOMICFILE_TEST_CRASH_WRITE"

func TestMain(m *testing.M) {
	if path := os.Getenv(crashEnv); path != "" {
		testHookBeforeCommit = func(string) {
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {}
		}
		_ = WriteFile(path, bytes.Repeat([]byte("new\n"), 1<<16), 0o600)
		os.Exit(3) // not reached: the hook kills the process
	}
	os.Exit(m.Run())
}

// TestCrashBeforeRename: a writer killed (SIGKILL, as an OOM kill or a
// power cut ends it) after it wrote and synced the new content but before
// the rename leaves the old file whole, and the temporary file it leaves
// is not a name any reader of the directory takes for the real file.
func TestCrashBeforeRename(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "10-net.conf")
	old := []byte(`{"cniVersion":"1.0.0","name":"old"}`)
	if err := WriteFile(path, old, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), crashEnv+"="+path)
	err := cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("writer: %v, want killed by SIGKILL before the rename", err)
	}
	got, err := os.ReadFile(path)
	if err != nil || !bytes.Equal(got, old) {
		t.Fatalf("after the crash %s holds %q (%v), want the old content %q", path, got, err, old)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, e := range ents {
		if e.Name() == filepath.Base(path) {
			continue
		}
		left = append(left, e.Name())
		// What a CNI runtime (libcni's ConfFiles), the release queue
		// (*.json) or a reader by name would take.
		for _, ext := range []string{".conf", ".conflist", ".json"} {
			if strings.HasSuffix(e.Name(), ext) {
				t.Errorf("the crash left %s, which a reader of *%s takes for a real file", e.Name(), ext)
			}
		}
		if !strings.HasPrefix(e.Name(), ".") {
			t.Errorf("the crash left %s, not a hidden file", e.Name())
		}
	}
	if len(left) != 1 {
		t.Errorf("left beside %s: %v, want the one temporary file of the killed writer", path, left)
	}
}

// TestWriteFile: the content and mode land whole, over an existing file,
// and a symlink at the destination is replaced, not written through.
func TestWriteFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "key")
	for _, content := range []string{"first", "second, longer"} {
		if err := WriteFile(path, []byte(content), 0o400); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(path)
		if err != nil || string(got) != content {
			t.Fatalf("read %q (%v), want %q", got, err, content)
		}
		if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o400 {
			t.Errorf("mode %v, want 0400 (no umask applied)", fi.Mode().Perm())
		}
	}
	victim := filepath.Join(dir, "victim")
	if err := os.WriteFile(victim, []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(victim, link); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(link, []byte("new"), 0o600); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(victim); string(b) != "keep" {
		t.Errorf("the symlink's target now holds %q: written through the link", b)
	}
	if fi, _ := os.Lstat(link); !fi.Mode().IsRegular() {
		t.Errorf("%s is %v, want the new regular file", link, fi.Mode())
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 3 {
		t.Errorf("directory holds %d entries, want 3 (no temporary file left)", len(ents))
	}
}

// TestCreateNew: CreateNew puts a new file in place but never replaces one.
func TestCreateNew(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "db")
	for i, want := range []error{nil, fs.ErrExist} {
		p, err := New(path, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := p.WriteString(string(rune('a' + i))); err != nil {
			t.Fatal(err)
		}
		err = p.CreateNew()
		p.Cleanup()
		if !errors.Is(err, want) {
			t.Errorf("CreateNew #%d: %v, want %v", i+1, err, want)
		}
	}
	if b, _ := os.ReadFile(path); string(b) != "a" {
		t.Errorf("%s holds %q, want the first file's %q", path, b, "a")
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("directory holds %d entries, want 1 (no temporary file left)", len(ents))
	}
}

// TestSymlink: the link is replaced in one step, whatever was there.
func TestSymlink(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "bridge")
	if err := os.WriteFile(path, []byte("foreign"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, target := range []string{"cnibox", "/opt/cni/bin/cnibox"} {
		if err := Symlink(target, path); err != nil {
			t.Fatal(err)
		}
		if got, err := os.Readlink(path); err != nil || got != target {
			t.Errorf("link -> %q (%v), want %q", got, err, target)
		}
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("directory holds %d entries, want 1", len(ents))
	}
}

// TestConcurrentWriters: writers of the same file at once (a fixed
// temporary name would let one rename another's half-written file) and a
// reader meanwhile: every read finds one writer's content whole.
func TestConcurrentWriters(t *testing.T) {
	path := filepath.Join(t.TempDir(), "subnet.env")
	content := func(w int) []byte { return bytes.Repeat([]byte{byte('a' + w)}, 64<<10) }
	if err := WriteFile(path, content(0), 0o644); err != nil {
		t.Fatal(err)
	}
	const writers = 4
	var wg sync.WaitGroup
	done := make(chan struct{})
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 50 {
				if err := WriteFile(path, content(w), 0o644); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	go func() { wg.Wait(); close(done) }()
	for reads := 0; ; reads++ {
		select {
		case <-done:
			return
		default:
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if len(b) != 64<<10 || bytes.Count(b, b[:1]) != len(b) {
			t.Fatalf("read %d: %d bytes, not one writer's content whole", reads, len(b))
		}
	}
}
