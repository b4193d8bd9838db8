package store

import (
	"bytes"
	"encoding/json"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Kind is a kind of record that a role keeps one per attachment, in a
// top-level bucket of its own, as JSON of the role's type T:
//
//	<Bucket>/  network \x00 containerID \x00 ifname -> T as JSON
//
// The role declares its Kind in its own package (or roles/internal/...) as
// package-level data: constants and the name of a function, never a value
// built by a call (TestNoInitCode). The store knows no role's kind: it
// keeps whatever kinds the roles declare (TestToolsNameNoRole), and the
// node's tools reach them through the roles' declarations (RawRecords).
// Every kind's JSON names the attachment as RawRecord does (network,
// containerID, ifName, and created, bootID, netns, pod and plugin where the
// record has them).
type Kind[T any] struct {
	// Bucket is the top-level bucket ("tuning").
	Bucket string
	// What names a record in messages ("tuning record").
	What string
	// Head returns a record's attachment and its creation time and boot
	// ID, which Put fills in when they are zero.
	Head func(*T) (at Attachment, created *time.Time, bootID *string)
}

// Attachment names one attachment: network, container ID and interface.
type Attachment struct{ Network, ContainerID, IfName string }

func (k Kind[T]) records() attachmentRecords[T] {
	return attachmentRecords[T]{records[T]{bucket: []byte(k.Bucket), what: k.What}}
}

// In returns the records of kind k in s; each method runs one transaction.
func (k Kind[T]) In(s *Store) Attachments[T] { return Attachments[T]{s: s, k: k} }

// Update runs fn in one read-write transaction on the records of kind k;
// it commits only when fn changed something and returned nil.
func (k Kind[T]) Update(s *Store, fn func(tx KindTx[T]) error) error {
	return s.update(func(tx *bolt.Tx) (bool, error) {
		t := KindTx[T]{k: k, s: s, tx: tx, changed: new(bool)}
		err := fn(t)
		return *t.changed, err
	})
}

// View runs fn in one read-only transaction on the records of kind k.
func (k Kind[T]) View(s *Store, fn func(tx KindTx[T]) error) error {
	return s.view(func(tx *bolt.Tx) error { return fn(KindTx[T]{k: k, s: s, tx: tx, changed: new(bool)}) })
}

// Attachments are the records of one kind in a store: Kind.In. Each method
// runs one transaction.
type Attachments[T any] struct {
	s *Store
	k Kind[T]
}

// Put records rec, replacing an earlier record of the same attachment.
// Created and BootID are filled in when zero.
func (a Attachments[T]) Put(rec T) error {
	at, created, bootID := a.k.Head(&rec)
	stamp(created, bootID, time.Now().UTC())
	return a.k.records().put(a.s, at.Network, at.ContainerID, at.IfName, rec)
}

// Get returns the record of one attachment.
func (a Attachments[T]) Get(network, containerID, ifname string) (T, bool, error) {
	return a.k.records().get(a.s, network, containerID, ifname)
}

// Delete removes the record of one attachment; a missing one is no error.
func (a Attachments[T]) Delete(network, containerID, ifname string) error {
	return a.k.records().delete(a.s, network, containerID, ifname)
}

// List returns the records of one network ("" = every network), ordered by
// network, container ID and ifname.
func (a Attachments[T]) List(network string) ([]T, error) {
	return a.k.records().list(a.s, network)
}

// KindTx is one transaction on the records of a kind (Kind.Update,
// Kind.View).
type KindTx[T any] struct {
	k       Kind[T]
	s       *Store
	tx      *bolt.Tx
	changed *bool
}

// Get returns the record of one attachment.
func (t KindTx[T]) Get(network, containerID, ifname string) (rec T, found bool, err error) {
	return t.k.records().getTx(t.s, t.tx, endpointKey(network, containerID, ifname))
}

// Put records rec, replacing an earlier record of the same attachment.
// Created and BootID are filled in when zero.
func (t KindTx[T]) Put(rec T) error {
	r := t.k.records()
	at, created, bootID := t.k.Head(&rec)
	key, name, err := r.attachment(at.Network, at.ContainerID, at.IfName)
	if err != nil {
		return err
	}
	stamp(created, bootID, time.Now())
	v, err := r.encode(name, rec)
	if err == nil {
		err = r.putTx(t.tx, key, name, v)
	}
	if err != nil {
		return err
	}
	*t.changed = true
	return nil
}

// Delete removes the record of one attachment; a missing one is no error.
func (t KindTx[T]) Delete(network, containerID, ifname string) error {
	deleted, err := t.k.records().deleteTx(t.tx, endpointKey(network, containerID, ifname), attachmentName(network, containerID, ifname))
	*t.changed = *t.changed || deleted
	return err
}

// List returns the records of one network ("" = every network), ordered by
// network, container ID and ifname.
func (t KindTx[T]) List(network string) ([]T, error) {
	return t.k.records().listTx(t.s, t.tx, networkPrefix(network))
}

// RawRecord is a record of any kind read without the role's type: the
// fields every kind's JSON names its attachment with (zero when the kind
// has none of them) and the record as it is stored. The node's tools
// (`cnibox gc`, doctor) judge a role's records by these fields and hand
// JSON to the role's hooks.
type RawRecord struct {
	Network     string `json:"network"`
	ContainerID string `json:"containerID"`
	IfName      string `json:"ifName"`
	Netns       string `json:"netns,omitempty"`
	// Pod is "namespace/name" from CNI_ARGS.
	Pod string `json:"pod,omitempty"`
	// Plugin is the role that wrote the record, when the kind says.
	Plugin  string    `json:"plugin,omitempty"`
	Created time.Time `json:"created"`
	BootID  string    `json:"bootID,omitempty"`
	// JSON is the record as stored.
	JSON json.RawMessage `json:"-"`
}

// Decode decodes the record into v, the role's type.
func (r RawRecord) Decode(v any) error { return json.Unmarshal(r.JSON, v) }

// RawRecords returns every record of the bucket of a kind, ordered by
// network, container ID and ifname. A record that cannot be decoded is an
// error wrapping ErrCorrupt.
func (s *Store) RawRecords(bucket string) ([]RawRecord, error) {
	r := records[RawRecord]{bucket: []byte(bucket), what: bucket + " record"}
	var out []RawRecord
	err := s.view(func(tx *bolt.Tx) error {
		b := tx.Bucket(r.bucket)
		if b == nil {
			return nil
		}
		return b.ForEach(func(k, v []byte) error {
			var rec RawRecord
			if err := r.decode(s, v, &rec); err != nil {
				return err
			}
			rec.JSON = bytes.Clone(v)
			out = append(out, rec)
			return nil
		})
	})
	return out, err
}

// DeleteRawRecord removes the record of one attachment from the bucket of
// a kind; a missing one is no error.
func (s *Store) DeleteRawRecord(bucket, network, containerID, ifname string) error {
	r := attachmentRecords[RawRecord]{records[RawRecord]{bucket: []byte(bucket), what: bucket + " record"}}
	return r.delete(s, network, containerID, ifname)
}
