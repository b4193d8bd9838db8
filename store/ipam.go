package store

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Reservation is one address held by one attachment (container ID + ifname)
// in one network.
type Reservation struct {
	Addr        netip.Addr
	Network     string
	ContainerID string
	IfName      string
	Pod         string       // "namespace/name", or "" when the runtime gave none
	Subnet      netip.Prefix // the subnet of the range the address came from
	Created     time.Time
	BootID      string
}

// IPAMTx is one transaction on the reservations of one network. It is only
// valid inside the function given to Store.IPAM or Store.ViewIPAM. The
// reading methods never fail: a record that cannot be decoded is reported
// (wrapping ErrCorrupt) by IPAM/ViewIPAM when the function returns.
type IPAMTx struct {
	network string
	tx      *bolt.Tx
	nb      *bolt.Bucket // ipam/<network>; nil until needed or when absent
	changed bool
	err     error
}

// IPAM runs fn in one read-write transaction on network's reservations. If
// fn returns an error nothing it did is kept. A transaction that changed
// nothing is not committed (no disk write).
func (s *Store) IPAM(network string, fn func(tx *IPAMTx) error) error {
	if network == "" {
		return errors.New("store: IPAM needs a network name")
	}
	return s.update(func(btx *bolt.Tx) (bool, error) {
		t := newIPAMTx(btx, network)
		if err := fn(t); err != nil {
			return false, err
		}
		if t.err != nil {
			return false, t.err
		}
		return t.changed, nil
	})
}

// ViewIPAM runs fn in one read-only transaction on network's reservations.
func (s *Store) ViewIPAM(network string, fn func(tx *IPAMTx) error) error {
	return s.view(func(btx *bolt.Tx) error {
		t := newIPAMTx(btx, network)
		if err := fn(t); err != nil {
			return err
		}
		return t.err
	})
}

func newIPAMTx(btx *bolt.Tx, network string) *IPAMTx {
	t := &IPAMTx{network: network, tx: btx}
	if top := btx.Bucket(bucketIPAM); top != nil {
		t.nb = top.Bucket([]byte(network))
	}
	return t
}

// Network returns the network this transaction works on.
func (t *IPAMTx) Network() string { return t.network }

// bucket returns a sub-bucket of the network, creating it (and the network's
// bucket) when create is set; without create a missing bucket is nil.
func (t *IPAMTx) bucket(name []byte, create bool) (*bolt.Bucket, error) {
	if t.nb == nil {
		if !create {
			return nil, nil
		}
		top, err := t.tx.CreateBucketIfNotExists(bucketIPAM)
		if err != nil {
			return nil, err
		}
		if t.nb, err = top.CreateBucketIfNotExists([]byte(t.network)); err != nil {
			return nil, err
		}
	}
	b := t.nb.Bucket(name)
	if b == nil && create {
		return t.nb.CreateBucket(name)
	}
	return b, nil
}

func (t *IPAMTx) read(name []byte) *bolt.Bucket {
	b, _ := t.bucket(name, false)
	return b
}

// get reads one value; a missing bucket reads as empty.
func (t *IPAMTx) get(name, key []byte) []byte {
	if b := t.read(name); b != nil {
		return b.Get(key)
	}
	return nil
}

func (t *IPAMTx) write(name []byte) (*bolt.Bucket, error) {
	b, err := t.bucket(name, true)
	if err != nil {
		return nil, fmt.Errorf("network %q: %w", t.network, err)
	}
	t.changed = true
	return b, nil
}

func (t *IPAMTx) corrupt(what string, err error) {
	if t.err == nil {
		t.err = fmt.Errorf("network %q: %s: %w: %v; %s", t.network, what, ErrCorrupt, err, corruptFix)
	}
}

func addrBucket(a netip.Addr) []byte {
	if a.Is4() {
		return bucketAddr4
	}
	return bucketAddr6
}

func runsBucket(a netip.Addr) []byte {
	if a.Is4() {
		return bucketRuns4
	}
	return bucketRuns6
}

func ownerPrefix(containerID, ifname string) []byte {
	k := make([]byte, 0, len(containerID)+len(ifname)+2+16)
	k = append(k, containerID...)
	k = append(k, sep)
	k = append(k, ifname...)
	return append(k, sep)
}

func ownerKey(containerID, ifname string, a netip.Addr) []byte {
	return append(ownerPrefix(containerID, ifname), a.AsSlice()...)
}

// Get returns the reservation of a.
func (t *IPAMTx) Get(a netip.Addr) (Reservation, bool) {
	if !a.IsValid() {
		return Reservation{}, false
	}
	a = a.Unmap()
	v := t.get(addrBucket(a), addrKey(a))
	if v == nil {
		return Reservation{}, false
	}
	r, err := decodeReservation(a, t.network, v)
	if err != nil {
		t.corrupt("reservation of "+a.String(), err)
	}
	return r, true
}

// ByOwner returns the reservations of one attachment, in address order per
// family (IPv4 first).
func (t *IPAMTx) ByOwner(containerID, ifname string) []Reservation {
	b := t.read(bucketOwner)
	if b == nil {
		return nil
	}
	var out []Reservation
	prefix := ownerPrefix(containerID, ifname)
	c := b.Cursor()
	for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
		a := keyAddr(k[len(prefix):])
		if r, ok := t.Get(a); ok {
			out = append(out, r)
		} else {
			t.corrupt("owner index entry for "+a.String(), errors.New("no reservation behind it"))
		}
	}
	return out
}

// Reserve records r. Created and BootID are filled in when zero. An address
// held by another attachment returns an error wrapping ErrTaken; one held by
// the same attachment is updated.
func (t *IPAMTx) Reserve(r Reservation) error {
	if !r.Addr.IsValid() || r.Addr.Zone() != "" {
		return fmt.Errorf("network %q: reserve %v: not a plain IP address", t.network, r.Addr)
	}
	if r.ContainerID == "" || r.IfName == "" {
		return fmt.Errorf("network %q: reserve %s: container ID and interface name are required", t.network, r.Addr)
	}
	r.Addr = r.Addr.Unmap()
	old, held := t.Get(r.Addr)
	if held && (old.ContainerID != r.ContainerID || old.IfName != r.IfName) {
		return fmt.Errorf("%w: %s in network %q is held by container %s interface %s", ErrTaken, r.Addr, t.network, old.ContainerID, old.IfName)
	}
	if r.Created.IsZero() {
		r.Created = time.Now()
	}
	if r.BootID == "" {
		r.BootID = BootID()
	}
	ab, err := t.write(addrBucket(r.Addr))
	if err != nil {
		return err
	}
	if err := ab.Put(addrKey(r.Addr), encodeReservation(r)); err != nil {
		return fmt.Errorf("network %q: reserve %s: %w", t.network, r.Addr, err)
	}
	if held {
		return nil
	}
	ob, err := t.write(bucketOwner)
	if err != nil {
		return err
	}
	if err := ob.Put(ownerKey(r.ContainerID, r.IfName, r.Addr), []byte{}); err != nil {
		return fmt.Errorf("network %q: reserve %s: %w", t.network, r.Addr, err)
	}
	rb, err := t.write(runsBucket(r.Addr))
	if err != nil {
		return err
	}
	if err := addRun(rb, r.Addr); err != nil {
		return fmt.Errorf("network %q: reserve %s: %w", t.network, r.Addr, err)
	}
	return nil
}

// Release frees a. An address that is not reserved is no error.
func (t *IPAMTx) Release(a netip.Addr) error {
	if !a.IsValid() {
		return nil
	}
	a = a.Unmap()
	r, held := t.Get(a)
	if !held {
		return nil
	}
	for _, step := range []struct {
		bucket []byte
		do     func(b *bolt.Bucket) error
	}{
		{addrBucket(a), func(b *bolt.Bucket) error { return b.Delete(addrKey(a)) }},
		{bucketOwner, func(b *bolt.Bucket) error { return b.Delete(ownerKey(r.ContainerID, r.IfName, a)) }},
		{runsBucket(a), func(b *bolt.Bucket) error { return removeRun(b, a) }},
	} {
		b, err := t.write(step.bucket)
		if err == nil {
			err = step.do(b)
		}
		if err != nil {
			return fmt.Errorf("network %q: release %s: %w", t.network, a, err)
		}
	}
	return nil
}

// ReleaseOwner frees every address of one attachment and returns what it
// freed. An attachment without addresses is no error.
func (t *IPAMTx) ReleaseOwner(containerID, ifname string) ([]Reservation, error) {
	rs := t.ByOwner(containerID, ifname)
	for _, r := range rs {
		if err := t.Release(r.Addr); err != nil {
			return nil, err
		}
	}
	return rs, nil
}

// Cursor returns the round-robin position (the last address handed out) of
// the range set with the given id.
func (t *IPAMTx) Cursor(setID string) (netip.Addr, bool) {
	v := t.get(bucketCursor, []byte(setID))
	a := keyAddr(v)
	return a, a.IsValid()
}

// SetCursor moves the round-robin position of a range set.
func (t *IPAMTx) SetCursor(setID string, a netip.Addr) error {
	if setID == "" || !a.IsValid() {
		return fmt.Errorf("network %q: set cursor %q to %v: id and address are required", t.network, setID, a)
	}
	b, err := t.write(bucketCursor)
	if err == nil {
		err = b.Put([]byte(setID), addrKey(a.Unmap()))
	}
	if err != nil {
		return fmt.Errorf("network %q: set cursor: %w", t.network, err)
	}
	return nil
}

// Sticky returns the addresses pod last held in this network, kept after
// their release so that a pod re-created under the same name can get them
// back.
func (t *IPAMTx) Sticky(pod string) []netip.Addr {
	if pod == "" {
		return nil
	}
	v := t.get(bucketSticky, []byte(pod))
	addrs, err := decodeAddrs(v)
	if err != nil {
		t.corrupt("sticky addresses of pod "+pod, err)
	}
	return addrs
}

// SetSticky records the addresses of pod; none deletes the record.
func (t *IPAMTx) SetSticky(pod string, addrs []netip.Addr) error {
	if pod == "" {
		return nil
	}
	b, err := t.write(bucketSticky)
	if err == nil {
		if len(addrs) == 0 {
			err = b.Delete([]byte(pod))
		} else {
			err = b.Put([]byte(pod), encodeAddrs(addrs))
		}
	}
	if err != nil {
		return fmt.Errorf("network %q: sticky addresses of %s: %w", t.network, pod, err)
	}
	return nil
}

// All returns every reservation of the network, IPv4 first, in address
// order. It reads the whole network: for GC and inspection, not for ADD/DEL.
func (t *IPAMTx) All() []Reservation {
	var out []Reservation
	for _, name := range [][]byte{bucketAddr4, bucketAddr6} {
		b := t.read(name)
		if b == nil {
			continue
		}
		c := b.Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			a := keyAddr(k)
			r, err := decodeReservation(a, t.network, v)
			if err != nil {
				t.corrupt("reservation of "+a.String(), err)
			}
			out = append(out, r)
		}
	}
	return out
}

// CountIn returns how many addresses in [start, end] are reserved. Its cost
// grows with the number of separate runs of reserved addresses in the
// interval, not with the number of addresses.
func (t *IPAMTx) CountIn(start, end netip.Addr) int {
	start, end = start.Unmap(), end.Unmap()
	if !start.IsValid() || start.BitLen() != end.BitLen() {
		return 0
	}
	n := countRuns(t.read(runsBucket(start)), start, end)
	if n > math.MaxInt {
		return math.MaxInt
	}
	return int(n)
}

// NextFree returns the first address in [from, to] that is not reserved,
// with one index seek.
func (t *IPAMTx) NextFree(from, to netip.Addr) (netip.Addr, bool) {
	from, to = from.Unmap(), to.Unmap()
	if !from.IsValid() || from.BitLen() != to.BitLen() || to.Less(from) {
		return netip.Addr{}, false
	}
	_, end, ok := runAt(t.read(runsBucket(from)), from)
	if !ok {
		return from, true
	}
	next := end.Next()
	if !next.IsValid() || to.Less(next) {
		return netip.Addr{}, false
	}
	return next, true
}

// NextReserved returns the first reserved address at or after from, in
// from's family.
func (t *IPAMTx) NextReserved(from netip.Addr) (netip.Addr, bool) {
	from = from.Unmap()
	if !from.IsValid() {
		return netip.Addr{}, false
	}
	b := t.read(addrBucket(from))
	if b == nil {
		return netip.Addr{}, false
	}
	k, _ := b.Cursor().Seek(addrKey(from))
	a := keyAddr(k)
	return a, a.IsValid()
}
