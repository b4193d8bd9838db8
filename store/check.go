package store

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"sort"

	bolt "go.etcd.io/bbolt"
)

// CheckReport is what Check found in a store file.
type CheckReport struct {
	Path string
	Size int64
	// Schema is the recorded schema version (0: none recorded, layout 1).
	Schema int
	// Boot is the boot that last reclaimed ghosts (ReclaimAfterReboot).
	Boot      string
	Networks  []NetworkCheck
	Endpoints int
	// Buckets counts the records of every top-level bucket by name.
	Buckets map[string]int
	// Problems lists every inconsistency found; none means the file is sound.
	Problems []string
}

// NetworkCheck is one network's part of a CheckReport.
type NetworkCheck struct {
	Name         string
	Reservations int
	Sticky       int
}

// Check reads the whole store: bbolt's own check of its pages, every record
// decoded, and the IPAM indexes (owner, runs) against the reservations.
// Inconsistencies go to the report's Problems; the error is for a file that
// cannot be read at all.
func (s *Store) Check() (rep CheckReport, err error) {
	rep = CheckReport{Path: s.path, Buckets: map[string]int{}}
	if st, serr := os.Stat(s.path); serr == nil {
		rep.Size = st.Size()
	}
	problem := func(format string, args ...any) {
		rep.Problems = append(rep.Problems, fmt.Sprintf(format, args...))
	}
	err = s.view(func(tx *bolt.Tx) error {
		for cerr := range tx.Check() {
			problem("pages: %v", cerr)
		}
		if m := tx.Bucket(bucketMeta); m != nil {
			switch v := m.Get(metaSchema); {
			case v == nil:
			case len(v) != 1:
				problem("meta/schema: %d bytes, want 1", len(v))
			default:
				rep.Schema = int(v[0])
				if rep.Schema > SchemaVersion {
					problem("schema version %d is newer than this cnibox's (%d): use a newer cnibox", rep.Schema, SchemaVersion)
				}
			}
			rep.Boot = string(m.Get(metaBoot))
		}
		if err := tx.ForEach(func(name []byte, b *bolt.Bucket) error {
			rep.Buckets[string(name)] = b.Stats().KeyN
			return nil
		}); err != nil {
			return err
		}
		if eps := tx.Bucket(endpointRecords.bucket); eps != nil {
			_ = eps.ForEach(func(k, v []byte) error {
				rep.Endpoints++
				var e Endpoint
				if err := json.Unmarshal(v, &e); err != nil {
					problem("endpoint record %q: %v", printable(k), err)
				} else if !bytes.Equal(k, endpointKey(e.Network, e.ContainerID, e.IfName)) {
					problem("endpoint record %q is filed under the wrong key", printable(k))
				}
				return nil
			})
		}
		// Every other top-level bucket holds JSON records: the store's own
		// (overlay.go, egress.go, ...) and the kinds the roles keep (Kind).
		if err := tx.ForEach(func(name []byte, b *bolt.Bucket) error {
			if bytes.Equal(name, bucketMeta) || bytes.Equal(name, bucketIPAM) || bytes.Equal(name, endpointRecords.bucket) {
				return nil
			}
			return b.ForEach(func(k, v []byte) error {
				if v != nil && !json.Valid(v) {
					problem("%s record %q is not valid JSON", name, printable(k))
				}
				return nil
			})
		}); err != nil {
			return err
		}
		top := tx.Bucket(bucketIPAM)
		if top == nil {
			return nil
		}
		return top.ForEach(func(k, v []byte) error {
			if v != nil {
				problem("ipam: stray key %q", printable(k))
				return nil
			}
			rep.Networks = append(rep.Networks, checkNetwork(newIPAMTx(tx, string(k)), problem))
			return nil
		})
	})
	sort.Strings(rep.Problems)
	return rep, err
}

// checkNetwork checks one network's reservations against its indexes.
func checkNetwork(t *IPAMTx, problem func(string, ...any)) NetworkCheck {
	nc := NetworkCheck{Name: t.network}
	where := func(format string, args ...any) {
		problem("network %q: %s", t.network, fmt.Sprintf(format, args...))
	}
	reserved := map[netip.Addr]Reservation{}
	for _, name := range [][]byte{bucketAddr4, bucketAddr6} {
		b := t.read(name)
		if b == nil {
			continue
		}
		_ = b.ForEach(func(k, v []byte) error {
			a := keyAddr(k)
			if !a.IsValid() || (a.Is4() != bytes.Equal(name, bucketAddr4)) {
				where("%s: key %x is not an address of its family", name, k)
				return nil
			}
			r, err := decodeReservation(a, t.network, v)
			if err != nil {
				where("reservation of %s: %v", a, err)
				return nil
			}
			if r.ContainerID == "" || r.IfName == "" {
				where("reservation of %s has no owner", a)
			}
			reserved[a] = r
			if t.get(bucketOwner, ownerKey(r.ContainerID, r.IfName, a)) == nil {
				where("reservation of %s (container %s interface %s) is missing from the owner index", a, r.ContainerID, r.IfName)
			}
			if _, _, ok := runAt(t.read(runsBucket(a)), a); !ok {
				where("reservation of %s is missing from the run index", a)
			}
			return nil
		})
	}
	nc.Reservations = len(reserved)
	if b := t.read(bucketOwner); b != nil {
		_ = b.ForEach(func(k, _ []byte) error {
			// containerID \x00 ifname \x00 address bytes; the first two
			// parts never contain the separator.
			j := bytes.IndexByte(k, sep)
			i := -1
			if j >= 0 {
				if n := bytes.IndexByte(k[j+1:], sep); n >= 0 {
					i = j + 1 + n
				}
			}
			if i < 0 {
				where("owner index: malformed key %q", printable(k))
				return nil
			}
			a := keyAddr(k[i+1:])
			r, ok := reserved[a]
			if !ok {
				where("owner index entry %q points to %v, which is not reserved", printable(k), a)
				return nil
			}
			if !bytes.Equal(k, ownerKey(r.ContainerID, r.IfName, a)) {
				where("owner index entry %q does not match the reservation of %s (container %s interface %s)", printable(k), a, r.ContainerID, r.IfName)
			}
			return nil
		})
	}
	for _, name := range [][]byte{bucketRuns4, bucketRuns6} {
		b := t.read(name)
		if b == nil {
			continue
		}
		var prevEnd netip.Addr
		_ = b.ForEach(func(k, v []byte) error {
			s, e := keyAddr(k), keyAddr(v)
			if !s.IsValid() || !e.IsValid() || e.Less(s) || s.BitLen() != e.BitLen() {
				where("%s: malformed run %x-%x", name, k, v)
				return nil
			}
			if prevEnd.IsValid() && !prevEnd.Next().Less(s) {
				where("%s: run %s-%s touches or overlaps the one before", name, s, e)
			}
			prevEnd = e
			n := 0
			for a := s; a.IsValid() && !e.Less(a) && n <= len(reserved); a = a.Next() {
				if _, ok := reserved[a]; !ok {
					where("%s: run %s-%s covers %s, which is not reserved", name, s, e, a)
					break
				}
				n++
			}
			return nil
		})
	}
	if b := t.read(bucketCursor); b != nil {
		_ = b.ForEach(func(k, v []byte) error {
			if !keyAddr(v).IsValid() {
				where("cursor of %q: %x is not an address", k, v)
			}
			return nil
		})
	}
	if b := t.read(bucketSticky); b != nil {
		_ = b.ForEach(func(k, v []byte) error {
			nc.Sticky++
			if _, err := decodeAddrs(v); err != nil {
				where("sticky addresses of %q: %v", k, err)
			}
			return nil
		})
	}
	return nc
}

// printable shows a key with its separators as '/'.
func printable(k []byte) string {
	return string(bytes.ReplaceAll(k, []byte{sep}, []byte("/")))
}
