package store

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// tornStore makes a store in a temp dir with one reservation, then damages
// every page after the two meta pages, as a crash that lost the data pages of
// the last commits would. It returns the dir and the damaged file's size.
func tornStore(t *testing.T) (string, int) {
	t.Helper()
	dir := t.TempDir()
	s := storeWithOne(t, dir)
	s.Close()
	b, err := os.ReadFile(s.Path())
	if err != nil {
		t.Fatal(err)
	}
	for i := 2 * os.Getpagesize(); i < len(b); i++ {
		b[i] = 0xff
	}
	if err := os.WriteFile(s.Path(), b, 0o600); err != nil {
		t.Fatal(err)
	}
	return dir, len(b)
}

// storeWithOne opens the store in dir and reserves 10.1.0.5 in network
// "net".
func storeWithOne(t *testing.T, dir string) *Store {
	t.Helper()
	s := openT(t, dir)
	if err := s.IPAM("net", func(tx *IPAMTx) error {
		return tx.Reserve(Reservation{Addr: a("10.1.0.5"), ContainerID: "c1", IfName: "eth0"})
	}); err != nil {
		t.Fatal(err)
	}
	return s
}

// openAndRead opens the store in dir and reads 10.1.0.5 of network "net":
// the error of whichever fails first. The store (if it opened) is closed at
// the end of the test.
func openAndRead(t *testing.T, dir string) (*Store, error) {
	t.Helper()
	s, err := Open(dir)
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { s.Close() })
	return s, s.ViewIPAM("net", func(tx *IPAMTx) error {
		tx.Get(a("10.1.0.5"))
		return nil
	})
}

func marker(t *testing.T, dir string) string {
	t.Helper()
	b, _ := os.ReadFile(filepath.Join(dir, FileName+verifiedSuffix))
	return strings.TrimSpace(string(b))
}

func tornFiles(t *testing.T, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, FileName+".torn-*"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestOpenMarksVerified(t *testing.T) {
	if BootID() == "" {
		t.Skip("no boot ID on this machine")
	}
	dir := t.TempDir()
	s := openT(t, dir)
	if got := marker(t, dir); got != BootID() {
		t.Errorf("marker after the first open = %q, want this boot's ID %q", got, BootID())
	}
	if !s.db.NoSync {
		t.Error("default mode flushes every commit; want commits left to the page cache")
	}
}

// TestTornStoreFromEarlierBoot: a file that was last verified in another boot
// and is now torn holds nothing of a running pod: it is kept aside and the
// store starts empty, instead of failing every CNI call.
func TestTornStoreFromEarlierBoot(t *testing.T) {
	if BootID() == "" {
		t.Skip("no boot ID on this machine")
	}
	dir, size := tornStore(t)
	if err := os.WriteFile(filepath.Join(dir, FileName+verifiedSuffix), []byte("an-earlier-boot\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := Open(dir)
	if err != nil {
		t.Fatalf("Open of a store torn in an earlier boot: %v", err)
	}
	defer s.Close()
	if err := s.ViewIPAM("net", func(tx *IPAMTx) error {
		if r, ok := tx.Get(a("10.1.0.5")); ok {
			t.Errorf("the new store has %+v", r)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := s.IPAM("net", func(tx *IPAMTx) error {
		return tx.Reserve(Reservation{Addr: a("10.1.0.5"), ContainerID: "c2", IfName: "eth0"})
	}); err != nil {
		t.Fatalf("reserve in the new store: %v", err)
	}
	torn := tornFiles(t, dir)
	if len(torn) != 1 {
		t.Fatalf("torn files kept: %v, want one", torn)
	}
	if fi, err := os.Stat(torn[0]); err != nil || fi.Size() != int64(size) {
		t.Errorf("kept file %s: %v, size %d, want the damaged file's %d bytes", torn[0], err, fi.Size(), size)
	}
	if got := marker(t, dir); got != BootID() {
		t.Errorf("marker = %q, want this boot's ID", got)
	}
}

// TestCorruptStoreNotDiscarded: corruption that no crash of an earlier boot
// explains (verified in this boot, or no marker: an older store) is reported
// and the file left for a person.
func TestCorruptStoreNotDiscarded(t *testing.T) {
	for _, tc := range []struct {
		name   string
		marker func(dir string) error
	}{
		{"verified in this boot", func(string) error { return nil }},
		{"no marker", func(dir string) error { return os.Remove(filepath.Join(dir, FileName+verifiedSuffix)) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, size := tornStore(t)
			if err := tc.marker(dir); err != nil {
				t.Fatal(err)
			}
			if _, err := openAndRead(t, dir); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("err = %v, want ErrCorrupt", err)
			}
			if torn := tornFiles(t, dir); len(torn) != 0 {
				t.Errorf("set aside: %v", torn)
			}
			if fi, err := os.Stat(filepath.Join(dir, FileName)); err != nil || fi.Size() != int64(size) {
				t.Errorf("the corrupt file was changed or moved: %v", err)
			}
		})
	}
}

func TestSyncEnv(t *testing.T) {
	env := func(v string) func(string) string {
		return func(k string) string {
			if k == EnvSync {
				return v
			}
			return ""
		}
	}
	dir := t.TempDir()
	_, err := OpenWith(dir, Options{Getenv: env("sometimes")})
	if !errors.Is(err, ErrInvalidEnv) || !strings.Contains(err.Error(), EnvSync) {
		t.Errorf("%s=sometimes: err = %v, want ErrInvalidEnv naming %s", EnvSync, err, EnvSync)
	}
	s, err := OpenWith(dir, Options{Getenv: env("always")})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.db.NoSync {
		t.Errorf("%s=always: commits are not flushed", EnvSync)
	}
	if got := marker(t, dir); got != "" {
		t.Errorf("%s=always wrote a boot marker %q (nothing to check per boot)", EnvSync, got)
	}
}
