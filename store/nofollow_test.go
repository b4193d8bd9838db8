package store

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// TestStoreSymlinkRefused: a symlink planted in place of the store file is
// not followed: the open fails and the file it names (here another store)
// is left as it was.
func TestStoreSymlinkRefused(t *testing.T) {
	victimDir, dir := t.TempDir(), t.TempDir()
	s := storeWithOne(t, victimDir)
	s.Close()
	victim := filepath.Join(victimDir, FileName)
	before, err := os.ReadFile(victim)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(victim, filepath.Join(dir, FileName)); err != nil {
		t.Fatal(err)
	}
	if s, err := Open(dir); err == nil {
		s.Close()
		t.Fatalf("Open of a store that is a symlink to %s succeeded", victim)
	}
	after, err := os.ReadFile(victim)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(before, after) {
		t.Error("the file the symlink names was written")
	}
}

// TestMarkerSymlinkNotFollowed: a symlink planted in place of the store's
// boot marker is not followed: the file it names keeps its content and the
// store still opens.
func TestMarkerSymlinkNotFollowed(t *testing.T) {
	if BootID() == "" {
		t.Skip("no boot ID on this kernel: the marker is never written")
	}
	dir := t.TempDir()
	s := storeWithOne(t, dir)
	s.Close()
	marker := filepath.Join(dir, FileName+verifiedSuffix)
	victim := filepath.Join(t.TempDir(), "precious")
	if err := os.WriteFile(victim, []byte("precious\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(marker); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(victim, marker); err != nil {
		t.Fatal(err)
	}
	s, err := Open(dir)
	if err != nil {
		t.Fatalf("Open with a symlinked marker: %v", err)
	}
	s.Close()
	if b, _ := os.ReadFile(victim); string(b) != "precious\n" {
		t.Errorf("the file the marker's symlink names now holds %q", b)
	}
}
