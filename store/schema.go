package store

import (
	"fmt"

	bolt "go.etcd.io/bbolt"
)

// SchemaVersion is the version of the store file's layout (layout.go,
// codec.go, the record types) that this cnibox writes. It is recorded in
// meta/schema when a file is created (or rebuilt); a file without it was
// created before versions were recorded and has layout 1.
const SchemaVersion = 1

var metaSchema = []byte("schema")

// initMeta records the schema version in a new store file.
func initMeta(tx *bolt.Tx) error {
	m, err := tx.CreateBucketIfNotExists(bucketMeta)
	if err == nil {
		err = m.Put(metaSchema, []byte{SchemaVersion})
	}
	if err != nil {
		return fmt.Errorf("record schema version: %w", err)
	}
	return nil
}

// Schema returns the schema version recorded in the file; 0 means none was
// recorded (a file from before versions were, with layout 1).
func (s *Store) Schema() (int, error) {
	v := 0
	err := s.view(func(tx *bolt.Tx) error {
		if m := tx.Bucket(bucketMeta); m != nil {
			if b := m.Get(metaSchema); len(b) == 1 {
				v = int(b[0])
			}
		}
		return nil
	})
	return v, err
}
