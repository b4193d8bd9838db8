package store

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"
)

// records are JSON records of one kind in one bucket: the overlay states
// under their device name, and (attachmentRecords) the records kept per
// attachment. The ...Tx methods work inside a caller's transaction; the
// others run one transaction each. A package-level records names its
// bucket with a literal ([]byte("name")), not another variable: copying a
// variable is code that runs at every start (TestNoInitCode).
type records[T any] struct {
	bucket []byte
	what   string // "endpoint record", for messages
}

// encode marshals rec; name says which record in messages.
func (r records[T]) encode(name string, rec T) ([]byte, error) {
	v, err := json.Marshal(rec)
	if err != nil {
		return nil, fmt.Errorf("store: encode %s %s: %w", r.what, name, err)
	}
	return v, nil
}

// putTx stores the encoded record v under key, replacing what was there.
func (r records[T]) putTx(tx *bolt.Tx, key []byte, name string, v []byte) error {
	b, err := tx.CreateBucketIfNotExists(r.bucket)
	if err == nil {
		err = b.Put(key, v)
	}
	if err != nil {
		return fmt.Errorf("store: put %s %s: %w", r.what, name, err)
	}
	return nil
}

// getTx returns the record under key.
func (r records[T]) getTx(s *Store, tx *bolt.Tx, key []byte) (rec T, found bool, err error) {
	b := tx.Bucket(r.bucket)
	if b == nil {
		return rec, false, nil
	}
	v := b.Get(key)
	if v == nil {
		return rec, false, nil
	}
	return rec, true, r.decode(s, v, &rec)
}

// deleteTx removes the record under key; deleted is false when there was none.
func (r records[T]) deleteTx(tx *bolt.Tx, key []byte, name string) (deleted bool, err error) {
	b := tx.Bucket(r.bucket)
	if b == nil || b.Get(key) == nil {
		return false, nil
	}
	if err := b.Delete(key); err != nil {
		return false, fmt.Errorf("store: delete %s %s: %w", r.what, name, err)
	}
	return true, nil
}

// listTx returns the records whose keys start with prefix (nil: all), in
// key order.
func (r records[T]) listTx(s *Store, tx *bolt.Tx, prefix []byte) ([]T, error) {
	b := tx.Bucket(r.bucket)
	if b == nil {
		return nil, nil
	}
	var out []T
	c := b.Cursor()
	for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
		var rec T
		if err := r.decode(s, v, &rec); err != nil {
			return nil, err
		}
		out = append(out, rec)
	}
	return out, nil
}

func (r records[T]) decode(s *Store, v []byte, rec *T) error {
	if err := json.Unmarshal(v, rec); err != nil {
		return fmt.Errorf("store %s: %s: %w: %v", s.path, r.what, ErrCorrupt, err)
	}
	return nil
}

func (r records[T]) putKey(s *Store, key []byte, name string, rec T) error {
	v, err := r.encode(name, rec)
	if err != nil {
		return err
	}
	return s.update(func(tx *bolt.Tx) (bool, error) {
		err := r.putTx(tx, key, name, v)
		return err == nil, err
	})
}

func (r records[T]) getKey(s *Store, key []byte) (rec T, found bool, err error) {
	err = s.view(func(tx *bolt.Tx) error {
		rec, found, err = r.getTx(s, tx, key)
		return err
	})
	return rec, found, err
}

func (r records[T]) deleteKey(s *Store, key []byte, name string) error {
	return s.update(func(tx *bolt.Tx) (bool, error) {
		return r.deleteTx(tx, key, name)
	})
}

func (r records[T]) listPrefix(s *Store, prefix []byte) (out []T, err error) {
	err = s.view(func(tx *bolt.Tx) error {
		out, err = r.listTx(s, tx, prefix)
		return err
	})
	return out, err
}

// attachmentRecords are records kept one per attachment, under network \x00
// containerID \x00 ifname (endpointKey): the endpoint records and the
// roles' kinds (Kind).
type attachmentRecords[T any] struct{ records[T] }

// attachmentName names an attachment in messages.
func attachmentName(network, containerID, ifname string) string {
	return network + "/" + containerID + "/" + ifname
}

// attachment checks the three parts of an attachment's key and returns the
// key and the name messages use.
func (r attachmentRecords[T]) attachment(network, containerID, ifname string) (key []byte, name string, err error) {
	if network == "" || containerID == "" || ifname == "" {
		return nil, "", fmt.Errorf("store: %s needs network, container ID and ifname (got %q, %q, %q)", r.what, network, containerID, ifname)
	}
	return endpointKey(network, containerID, ifname), attachmentName(network, containerID, ifname), nil
}

func (r attachmentRecords[T]) put(s *Store, network, containerID, ifname string, rec T) error {
	key, name, err := r.attachment(network, containerID, ifname)
	if err != nil {
		return err
	}
	return r.putKey(s, key, name, rec)
}

func (r attachmentRecords[T]) get(s *Store, network, containerID, ifname string) (T, bool, error) {
	return r.getKey(s, endpointKey(network, containerID, ifname))
}

func (r attachmentRecords[T]) delete(s *Store, network, containerID, ifname string) error {
	return r.deleteKey(s, endpointKey(network, containerID, ifname), attachmentName(network, containerID, ifname))
}

// list returns the records of one network ("" = every network), ordered by
// network, container ID and ifname.
func (r attachmentRecords[T]) list(s *Store, network string) ([]T, error) {
	return r.listPrefix(s, networkPrefix(network))
}

// networkPrefix is the key prefix of one network's attachments (nil for "":
// every network).
func networkPrefix(network string) []byte {
	if network == "" {
		return nil
	}
	return append([]byte(network), sep)
}

// stamp fills in a new record's creation time and boot ID when they are zero.
func stamp(created *time.Time, bootID *string, now time.Time) {
	if created.IsZero() {
		*created = now
	}
	if *bootID == "" {
		*bootID = BootID()
	}
}
