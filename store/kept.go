package store

import (
	"bytes"
	"fmt"
)

// A role may keep records of its own beside a network's reservations, so
// that they change in the same transaction as the addresses (cloud IPAM's
// last answer of the provider):
//
//	ipam/<network>/<bucket>/  key -> the role's value
//
// The store knows no such bucket: the role names it. Its bucket must not
// be one of the allocator's (layout.go).

// allocatorBuckets are the buckets of ipam/<network>/ that are the
// allocator's own.
func allocatorBucket(name []byte) bool {
	for _, b := range [][]byte{bucketAddr4, bucketAddr6, bucketRuns4, bucketRuns6, bucketOwner, bucketCursor, bucketSticky} {
		if bytes.Equal(name, b) {
			return true
		}
	}
	return false
}

// Kept returns the value a role keeps under key in bucket beside the
// transaction's network's reservations (nil: none). The slice is valid
// only during the transaction.
func (t *IPAMTx) Kept(bucket, key string) []byte {
	if allocatorBucket([]byte(bucket)) {
		return nil
	}
	return t.get([]byte(bucket), []byte(key))
}

// PutKept replaces the value a role keeps under key in bucket beside the
// transaction's network's reservations.
func (t *IPAMTx) PutKept(bucket, key string, v []byte) error {
	if allocatorBucket([]byte(bucket)) {
		return fmt.Errorf("network %q: bucket %q is the allocator's", t.network, bucket)
	}
	b, err := t.write([]byte(bucket))
	if err == nil {
		err = b.Put([]byte(key), v)
	}
	if err != nil {
		return fmt.Errorf("network %q: write %s/%s: %w", t.network, bucket, key, err)
	}
	return nil
}

// kept reads every value the roles keep beside the network's
// reservations, by "bucket/key".
func (t *IPAMTx) kept() map[string][]byte {
	out := map[string][]byte{}
	if t.nb == nil {
		return out
	}
	_ = t.nb.ForEach(func(name, v []byte) error {
		if v != nil || allocatorBucket(name) {
			return nil
		}
		b := t.nb.Bucket(name)
		return b.ForEach(func(k, v []byte) error {
			if v != nil {
				out[string(name)+"/"+string(k)] = bytes.Clone(v)
			}
			return nil
		})
	})
	return out
}
