package store

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"
)

// bucketDelegates holds the delegate records of meta roles:
//
//	delegates/  network \x00 containerID \x00 ifname -> DelegateRecord as JSON
var bucketDelegates = []byte("delegates")

// DelegateRecord is what a meta role (flannel, multi) handed to its delegates
// for one attachment, so that DEL, CHECK and GC replay exactly that instead of
// rebuilding it from files that may have changed or gone.
type DelegateRecord struct {
	Network     string `json:"network"`
	ContainerID string `json:"containerID"`
	IfName      string `json:"ifName"`
	Netns       string `json:"netns,omitempty"`
	// Pod is "namespace/name" from CNI_ARGS, when the runtime gave it.
	Pod string `json:"pod,omitempty"`
	// Plugin is the meta role, e.g. "flannel".
	Plugin    string     `json:"plugin"`
	Delegates []Delegate `json:"delegates"`
	Created   time.Time  `json:"created"`
	BootID    string     `json:"bootID,omitempty"`
}

// Delegate is one delegated network of a record: the resolved config (one
// plugin config or a conflist, as the role decides) and the interface it was
// given.
type Delegate struct {
	// Name is the delegate's network name.
	Name   string `json:"name"`
	IfName string `json:"ifName"`
	// Type is the plugin type of a single-plugin config ("" for a conflist).
	Type string          `json:"type,omitempty"`
	Conf json.RawMessage `json:"conf"`
	// Result is the delegate's ADD result (as the delegate printed it), once
	// the ADD succeeded.
	Result json.RawMessage `json:"result,omitempty"`
}

// PutDelegateRecord records r (replacing an earlier record of the same
// attachment). Created and BootID are filled in when zero.
func (s *Store) PutDelegateRecord(r DelegateRecord) error {
	if r.Network == "" || r.ContainerID == "" || r.IfName == "" {
		return fmt.Errorf("store: delegate record needs network, container ID and ifname (got %q, %q, %q)", r.Network, r.ContainerID, r.IfName)
	}
	if r.Created.IsZero() {
		r.Created = time.Now()
	}
	if r.BootID == "" {
		r.BootID = BootID()
	}
	v, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("store: encode delegate record %s/%s/%s: %w", r.Network, r.ContainerID, r.IfName, err)
	}
	return s.update(func(tx *bolt.Tx) (bool, error) {
		b, err := tx.CreateBucketIfNotExists(bucketDelegates)
		if err == nil {
			err = b.Put(endpointKey(r.Network, r.ContainerID, r.IfName), v)
		}
		if err != nil {
			return false, fmt.Errorf("store: put delegate record %s/%s/%s: %w", r.Network, r.ContainerID, r.IfName, err)
		}
		return true, nil
	})
}

// GetDelegateRecord returns the delegate record of one attachment.
func (s *Store) GetDelegateRecord(network, containerID, ifname string) (r DelegateRecord, found bool, err error) {
	err = s.view(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketDelegates)
		if b == nil {
			return nil
		}
		v := b.Get(endpointKey(network, containerID, ifname))
		if v == nil {
			return nil
		}
		found = true
		return s.decodeDelegateRecord(v, &r)
	})
	return r, found, err
}

// DeleteDelegateRecord removes the delegate record of one attachment; a
// missing one is no error.
func (s *Store) DeleteDelegateRecord(network, containerID, ifname string) error {
	return s.update(func(tx *bolt.Tx) (bool, error) {
		b := tx.Bucket(bucketDelegates)
		k := endpointKey(network, containerID, ifname)
		if b == nil || b.Get(k) == nil {
			return false, nil
		}
		return true, b.Delete(k)
	})
}

// DelegateRecords returns the delegate records of one network ("" = every
// network), ordered by network, container ID and ifname.
func (s *Store) DelegateRecords(network string) ([]DelegateRecord, error) {
	var out []DelegateRecord
	err := s.view(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketDelegates)
		if b == nil {
			return nil
		}
		var prefix []byte
		if network != "" {
			prefix = append([]byte(network), sep)
		}
		c := b.Cursor()
		k, v := c.First()
		if prefix != nil {
			k, v = c.Seek(prefix)
		}
		for ; k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
			var r DelegateRecord
			if err := s.decodeDelegateRecord(v, &r); err != nil {
				return err
			}
			out = append(out, r)
		}
		return nil
	})
	return out, err
}

func (s *Store) decodeDelegateRecord(v []byte, r *DelegateRecord) error {
	if err := json.Unmarshal(v, r); err != nil {
		return fmt.Errorf("store %s: delegate record: %w: %v", s.path, ErrCorrupt, err)
	}
	return nil
}
