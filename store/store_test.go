package store

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	bolt "go.etcd.io/bbolt"
)

func openT(t *testing.T, dir string) *Store {
	t.Helper()
	s, err := Open(dir)
	if err != nil {
		t.Fatalf("Open(%s): %v", dir, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestDir(t *testing.T) {
	tests := []struct {
		name, configured, env, want string
	}{
		{"default", "", "", DefaultDir},
		{"env", "", "/tmp/env", "/tmp/env"},
		{"configured wins", "/tmp/conf", "/tmp/env", "/tmp/conf"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			getenv := func(k string) string {
				if k == EnvDataDir {
					return tt.env
				}
				return ""
			}
			if got := DirFrom(tt.configured, getenv); got != tt.want {
				t.Errorf("DirFrom(%q) = %q, want %q", tt.configured, got, tt.want)
			}
			t.Setenv(EnvDataDir, tt.env)
			if got := Dir(tt.configured); got != tt.want {
				t.Errorf("Dir(%q) = %q, want %q", tt.configured, got, tt.want)
			}
		})
	}
}

func TestOpenCreates(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "b")
	s := openT(t, dir)
	if want := filepath.Join(dir, FileName); s.Path() != want {
		t.Errorf("Path() = %q, want %q", s.Path(), want)
	}
	st, err := os.Stat(dir)
	if err != nil || st.Mode().Perm() != 0o700 {
		t.Errorf("dir mode = %v, %v; want 0700", st.Mode().Perm(), err)
	}
	st, err = os.Stat(s.Path())
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("file mode = %v, %v; want 0600", st.Mode().Perm(), err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	left, _ := filepath.Glob(filepath.Join(dir, ".*"))
	if len(left) != 0 {
		t.Errorf("temporary files left behind: %v", left)
	}
	// Reopen an existing store.
	openT(t, dir)
}

func TestOpenBusy(t *testing.T) {
	dir := t.TempDir()
	holder := openT(t, dir)

	start := time.Now()
	_, err := OpenWith(dir, Options{Timeout: 150 * time.Millisecond})
	if !errors.Is(err, ErrBusy) {
		t.Fatalf("second open: err = %v, want ErrBusy", err)
	}
	if d := time.Since(start); d < 150*time.Millisecond {
		t.Errorf("gave up after %s, before the timeout", d)
	}
	var te *types.Error
	if !errors.As(err, &te) || te.Code != types.ErrTryAgainLater {
		t.Errorf("busy error carries %+v, want CNI code 11", te)
	}
	if !strings.Contains(err.Error(), holder.Path()) {
		t.Errorf("message %q does not name the file", err)
	}

	// A waiter gets the lock as soon as the holder closes.
	got := make(chan error, 1)
	go func() {
		s, err := OpenWith(dir, Options{Timeout: 5 * time.Second})
		if err == nil {
			s.Close()
		}
		got <- err
	}()
	time.Sleep(50 * time.Millisecond)
	holder.Close()
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("waiter: %v", err)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("waiter did not get the lock after the holder closed")
	}
}

func TestOpenTimeoutEnv(t *testing.T) {
	tests := []struct {
		name, val string
		want      time.Duration
		wantErr   bool
	}{
		{"unset", "", DefaultTimeout, false},
		{"set", "250ms", 250 * time.Millisecond, false},
		{"garbage", "soon", 0, true},
		{"zero", "0s", 0, true},
		{"negative", "-1s", 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := Options{Getenv: func(k string) string {
				if k == EnvTimeout {
					return tt.val
				}
				return ""
			}}
			got, err := o.timeout()
			if tt.wantErr {
				if !errors.Is(err, ErrInvalidEnv) || !strings.Contains(err.Error(), EnvTimeout) {
					t.Fatalf("err = %v, want ErrInvalidEnv naming %s", err, EnvTimeout)
				}
				if _, err := OpenWith(t.TempDir(), o); !errors.Is(err, ErrInvalidEnv) {
					t.Errorf("OpenWith: err = %v, want ErrInvalidEnv", err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Errorf("timeout() = %v, %v; want %v", got, err, tt.want)
			}
		})
	}
}

func TestOpenCorrupt(t *testing.T) {
	tests := []struct {
		name    string
		content []byte
	}{
		{"empty", nil},
		{"short garbage", []byte("not a database")},
		{"page of garbage", []byte(strings.Repeat("garbage!", 4096))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, FileName)
			if err := os.WriteFile(path, tt.content, 0o600); err != nil {
				t.Fatal(err)
			}
			s, err := Open(dir)
			if err == nil {
				s.Close()
				t.Fatal("Open succeeded on a corrupt file")
			}
			t.Log(err)
			if !errors.Is(err, ErrCorrupt) {
				t.Errorf("err = %v, want ErrCorrupt", err)
			}
			if !strings.Contains(err.Error(), path) {
				t.Errorf("message %q does not name %s", err, path)
			}
			// The file is left alone for a person to look at.
			if b, _ := os.ReadFile(path); len(b) != len(tt.content) {
				t.Errorf("file changed: %d bytes, want %d", len(b), len(tt.content))
			}
		})
	}
}

func TestOpenUnwritableDir(t *testing.T) {
	if os.Geteuid() == 0 {
		// root ignores directory permissions; use a path under a file instead.
		f := filepath.Join(t.TempDir(), "file")
		os.WriteFile(f, nil, 0o600)
		if _, err := Open(filepath.Join(f, "sub")); err == nil || errors.Is(err, ErrCorrupt) {
			t.Fatalf("err = %v, want an I/O error", err)
		}
		return
	}
	dir := t.TempDir()
	os.Chmod(dir, 0o500)
	if _, err := Open(filepath.Join(dir, "sub")); err == nil {
		t.Fatal("Open succeeded in an unwritable directory")
	}
}

func TestBootID(t *testing.T) {
	id := BootID()
	if _, err := os.Stat(bootIDFile); err == nil && len(id) != 36 {
		t.Errorf("BootID() = %q, want a UUID", id)
	}
	if BootID() != id {
		t.Error("BootID changed between calls")
	}
}

func TestOpenNoCreate(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "sub")
	if _, err := OpenWith(dir, Options{NoCreate: true}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("err = %v, want ErrNotFound", err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("NoCreate created %s", dir)
	}
	openT(t, dir).Close()
	s, err := OpenWith(dir, Options{NoCreate: true})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
}

// TestCorruptPages damages the pages after the two meta pages: opening or
// reading must report ErrCorrupt, not crash.
func TestCorruptPages(t *testing.T) {
	for _, keepFreelist := range []bool{false, true} {
		t.Run(fmt.Sprintf("keepFreelist=%v", keepFreelist), func(t *testing.T) {
			dir := t.TempDir()
			s := storeWithOne(t, dir)
			freelist := -1
			s.db.View(func(tx *bolt.Tx) error {
				for i := 0; ; i++ {
					pi, err := tx.Page(i)
					if err != nil || pi == nil {
						return nil
					}
					if pi.Type == "freelist" {
						freelist = i
					}
				}
			})
			s.Close()
			b, err := os.ReadFile(s.Path())
			if err != nil {
				t.Fatal(err)
			}
			page := os.Getpagesize()
			for i := 2 * page; i < len(b); i++ {
				if keepFreelist && i/page == freelist {
					continue
				}
				b[i] = 0xff
			}
			if err := os.WriteFile(s.Path(), b, 0o600); err != nil {
				t.Fatal(err)
			}
			s2, err := openAndRead(t, dir)
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("err = %v, want ErrCorrupt", err)
			}
			if s2 != nil {
				// The store stays usable for closing after a failed transaction.
				if err := s2.IPAM("net", func(*IPAMTx) error { return nil }); !errors.Is(err, ErrCorrupt) {
					t.Errorf("second transaction: %v", err)
				}
			}
		})
	}
}
