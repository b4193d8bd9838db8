package store

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

// fill reserves n addresses and writes n endpoint records in network "net".
func fill(t *testing.T, s *Store, n int) {
	t.Helper()
	update(t, s, func(tx *IPAMTx) error {
		addr := a("10.1.0.1")
		for i := 0; i < n; i++ {
			if err := tx.Reserve(res(addr.String(), fmt.Sprintf("c%d", i), "eth0")); err != nil {
				return err
			}
			addr = addr.Next()
		}
		return tx.SetCursor("set", addr)
	})
	for i := 0; i < n; i++ {
		if err := s.PutEndpoint(Endpoint{Network: "net", ContainerID: fmt.Sprintf("c%d", i), IfName: "eth0", Netns: "/run/netns/x"}); err != nil {
			t.Fatal(err)
		}
	}
}

func TestCheckSound(t *testing.T) {
	s := openT(t, t.TempDir())
	fill(t, s, 300)
	update(t, s, func(tx *IPAMTx) error { return tx.Release(a("10.1.0.50")) })
	rep, err := s.Check()
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Problems) != 0 {
		t.Errorf("problems in a sound store: %v", rep.Problems)
	}
	if rep.Schema != SchemaVersion || rep.Endpoints != 300 || len(rep.Networks) != 1 || rep.Networks[0].Reservations != 299 {
		t.Errorf("report %+v: want schema %d, 300 endpoints, one network with 299 reservations", rep, SchemaVersion)
	}
	if v, err := s.Schema(); err != nil || v != SchemaVersion {
		t.Errorf("Schema() = %d, %v", v, err)
	}
}

// TestCheckFindsBrokenIndexes breaks each index by hand; Check names it.
func TestCheckFindsBrokenIndexes(t *testing.T) {
	tests := []struct {
		name   string
		break_ func(nb *bolt.Bucket) error
		want   string
	}{
		{"owner entry missing", func(nb *bolt.Bucket) error {
			return nb.Bucket(bucketOwner).Delete(ownerKey("c3", "eth0", a("10.1.0.4")))
		}, "missing from the owner index"},
		{"stray owner entry", func(nb *bolt.Bucket) error {
			return nb.Bucket(bucketOwner).Put(ownerKey("ghost", "eth0", a("10.1.0.99")), []byte{})
		}, "which is not reserved"},
		{"run too long", func(nb *bolt.Bucket) error {
			return nb.Bucket(bucketRuns4).Put(addrKey(a("10.1.0.1")), addrKey(a("10.1.0.20")))
		}, "which is not reserved"},
		{"run missing", func(nb *bolt.Bucket) error {
			return nb.Bucket(bucketRuns4).Delete(addrKey(a("10.1.0.1")))
		}, "missing from the run index"},
		{"bad reservation", func(nb *bolt.Bucket) error {
			return nb.Bucket(bucketAddr4).Put(addrKey(a("10.1.0.2")), []byte{9, 9})
		}, "reservation of 10.1.0.2"},
		{"bad sticky", func(nb *bolt.Bucket) error {
			b, err := nb.CreateBucketIfNotExists(bucketSticky)
			if err != nil {
				return err
			}
			return b.Put([]byte("ns/p"), []byte{7, 1})
		}, "sticky addresses"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := openT(t, t.TempDir())
			fill(t, s, 10)
			if err := s.db.Update(func(tx *bolt.Tx) error {
				return tt.break_(tx.Bucket(bucketIPAM).Bucket([]byte("net")))
			}); err != nil {
				t.Fatal(err)
			}
			rep, err := s.Check()
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(strings.Join(rep.Problems, "\n"), tt.want) {
				t.Errorf("problems %q, want one with %q", rep.Problems, tt.want)
			}
		})
	}
	s := openT(t, t.TempDir())
	fill(t, s, 1)
	if err := s.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(endpointRecords.bucket).Put([]byte("net\x00c0\x00eth0"), []byte("{not json"))
	}); err != nil {
		t.Fatal(err)
	}
	if rep, _ := s.Check(); len(rep.Problems) != 1 || !strings.Contains(rep.Problems[0], "endpoint record") {
		t.Errorf("problems %q, want the endpoint record", rep.Problems)
	}
}

// TestTruncatedStore cuts a store file short at several points (a power
// cut while a file system without data journaling was growing it): opening
// or reading reports ErrCorrupt with the file's path and the recovery
// command, never a crash, and Check does not crash either.
func TestTruncatedStore(t *testing.T) {
	src := t.TempDir()
	s, err := Open(src)
	if err != nil {
		t.Fatal(err)
	}
	fill(t, s, 2000)
	s.Close()
	whole, err := os.ReadFile(filepath.Join(src, FileName))
	if err != nil {
		t.Fatal(err)
	}
	page := os.Getpagesize()
	sizes := []int{1, 100, page, page + 100, 2 * page, 3 * page, len(whole) - page, len(whole) - 1}
	for p := 4; p*page < len(whole); p += 12 {
		sizes = append(sizes, p*page, p*page+page/2)
	}
	for _, size := range sizes {
		t.Run(fmt.Sprintf("%d of %d bytes", size, len(whole)), func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, FileName)
			if err := os.WriteFile(path, whole[:size], 0o600); err != nil {
				t.Fatal(err)
			}
			s, err := Open(dir)
			if err == nil {
				defer s.Close()
				err = s.ViewIPAM("net", func(tx *IPAMTx) error {
					tx.All()
					return nil
				})
				if err == nil {
					_, err = s.Endpoints("")
				}
				if err == nil {
					var rep CheckReport
					rep, err = s.Check()
					if err == nil && len(rep.Problems) > 0 {
						err = fmt.Errorf("%w: %s", ErrCorrupt, rep.Problems[0])
					}
				}
			}
			if err == nil {
				t.Skip("the cut left every page the file uses intact")
			}
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("err = %v, want ErrCorrupt", err)
			}
			t.Log(err)
			if msg := err.Error(); !strings.Contains(msg, path) && !strings.HasPrefix(msg, ErrCorrupt.Error()) {
				t.Errorf("message %q does not name %s", msg, path)
			}
			if !strings.Contains(err.Error(), "cnibox store rebuild") && !strings.HasPrefix(err.Error(), ErrCorrupt.Error()) {
				t.Errorf("message %q does not name the recovery command", err)
			}
		})
	}
}

// TestRebuild replaces a broken file atomically and keeps it aside.
func TestRebuild(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, FileName)
	if err := os.WriteFile(path, []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	backup, err := Rebuild(dir, Options{}, func(s *Store) error {
		return s.IPAM("net", func(tx *IPAMTx) error {
			return tx.Reserve(res("10.1.0.7", "c7", "eth0"))
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(backup); err != nil || string(b) != "garbage" {
		t.Errorf("backup %s: %q, %v", backup, b, err)
	}
	s := openT(t, dir)
	rep, err := s.Check()
	if err != nil || len(rep.Problems) != 0 || rep.Schema != SchemaVersion || rep.Networks[0].Reservations != 1 {
		t.Errorf("rebuilt store: %+v, %v", rep, err)
	}
	st, _ := os.Stat(path)
	if st.Mode().Perm() != 0o600 {
		t.Errorf("rebuilt file mode %v, want 0600", st.Mode().Perm())
	}
	s.Close()

	// A failing fill changes nothing.
	if _, err := Rebuild(dir, Options{}, func(*Store) error { return errors.New("no") }); err == nil {
		t.Error("Rebuild with a failing fill succeeded")
	}
	s = openT(t, dir)
	s.ViewIPAM("net", func(tx *IPAMTx) error {
		if _, ok := tx.Get(netip.MustParseAddr("10.1.0.7")); !ok {
			t.Error("a failed rebuild lost the store")
		}
		return nil
	})
	s.Close()

	// A holder of the old file's lock delays the rebuild up to the timeout.
	s = openT(t, dir)
	if _, err := Rebuild(dir, Options{Timeout: 100e6}, func(*Store) error { return nil }); !errors.Is(err, ErrBusy) {
		t.Errorf("Rebuild while the store is open: %v, want ErrBusy", err)
	}
	s.Close()
}

// TestRelockIfReplaced: a process that got the lock of a file that Rebuild
// replaced meanwhile moves on to the new file.
func TestRelockIfReplaced(t *testing.T) {
	dir := t.TempDir()
	openT(t, dir).Close()
	path := filepath.Join(dir, FileName)
	deadline := time.Now().Add(time.Second)
	old, err := openLocked(path, deadline, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	oldInfo, _ := old.Stat()
	old.Close()
	if _, err := Rebuild(dir, Options{}, func(*Store) error { return nil }); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(path+"."+"x", os.O_CREATE|os.O_RDWR, 0o600) // stands for the old inode
	if err != nil {
		t.Fatal(err)
	}
	got, err := relockIfReplaced(f, path, deadline, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer got.Close()
	gi, _ := got.Stat()
	pi, _ := os.Stat(path)
	if !os.SameFile(gi, pi) || os.SameFile(gi, oldInfo) {
		t.Error("relockIfReplaced did not move to the file now at the path")
	}
}
