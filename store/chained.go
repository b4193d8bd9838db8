package store

import (
	"bytes"
	"encoding/json"
	"fmt"

	bolt "go.etcd.io/bbolt"
)

// attachmentRecords are JSON records of one kind, one per attachment, kept
// in bucket under network \x00 containerID \x00 ifname (the key of the
// endpoint records). The tuning and bandwidth records use them.
type attachmentRecords[T any] struct {
	bucket []byte
	what   string // "tuning record", for messages
}

func (r attachmentRecords[T]) put(s *Store, network, containerID, ifname string, rec T) error {
	if network == "" || containerID == "" || ifname == "" {
		return fmt.Errorf("store: %s needs network, container ID and ifname (got %q, %q, %q)", r.what, network, containerID, ifname)
	}
	v, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("store: encode %s %s/%s/%s: %w", r.what, network, containerID, ifname, err)
	}
	return s.update(func(tx *bolt.Tx) (bool, error) {
		b, err := tx.CreateBucketIfNotExists(r.bucket)
		if err == nil {
			err = b.Put(endpointKey(network, containerID, ifname), v)
		}
		if err != nil {
			return false, fmt.Errorf("store: put %s %s/%s/%s: %w", r.what, network, containerID, ifname, err)
		}
		return true, nil
	})
}

func (r attachmentRecords[T]) get(s *Store, network, containerID, ifname string) (rec T, found bool, err error) {
	err = s.view(func(tx *bolt.Tx) error {
		b := tx.Bucket(r.bucket)
		if b == nil {
			return nil
		}
		v := b.Get(endpointKey(network, containerID, ifname))
		if v == nil {
			return nil
		}
		found = true
		return r.decode(s, v, &rec)
	})
	return rec, found, err
}

func (r attachmentRecords[T]) delete(s *Store, network, containerID, ifname string) error {
	return s.update(func(tx *bolt.Tx) (bool, error) {
		b := tx.Bucket(r.bucket)
		k := endpointKey(network, containerID, ifname)
		if b == nil || b.Get(k) == nil {
			return false, nil
		}
		if err := b.Delete(k); err != nil {
			return false, fmt.Errorf("store: delete %s %s/%s/%s: %w", r.what, network, containerID, ifname, err)
		}
		return true, nil
	})
}

// list returns the records of one network ("" = every network), ordered by
// network, container ID and ifname.
func (r attachmentRecords[T]) list(s *Store, network string) ([]T, error) {
	var out []T
	err := s.view(func(tx *bolt.Tx) error {
		b := tx.Bucket(r.bucket)
		if b == nil {
			return nil
		}
		var prefix []byte
		if network != "" {
			prefix = append([]byte(network), sep)
		}
		c := b.Cursor()
		for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
			var rec T
			if err := r.decode(s, v, &rec); err != nil {
				return err
			}
			out = append(out, rec)
		}
		return nil
	})
	return out, err
}

func (r attachmentRecords[T]) decode(s *Store, v []byte, rec *T) error {
	if err := json.Unmarshal(v, rec); err != nil {
		return fmt.Errorf("store %s: %s: %w: %v", s.path, r.what, ErrCorrupt, err)
	}
	return nil
}
