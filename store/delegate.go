package store

import (
	"encoding/json"
	"time"
)

// Bucket delegates holds the delegate records of meta roles:
//
//	delegates/  network \x00 containerID \x00 ifname -> DelegateRecord as JSON

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

// delegateRecords is the delegates bucket, kept like the other per-attachment
// records (records.go).
var delegateRecords = attachmentRecords[DelegateRecord]{records[DelegateRecord]{bucket: []byte("delegates"), what: "delegate record"}}

// PutDelegateRecord records r (replacing an earlier record of the same
// attachment). Created and BootID are filled in when zero.
func (s *Store) PutDelegateRecord(r DelegateRecord) error {
	stamp(&r.Created, &r.BootID, time.Now())
	return delegateRecords.put(s, r.Network, r.ContainerID, r.IfName, r)
}

// GetDelegateRecord returns the delegate record of one attachment.
func (s *Store) GetDelegateRecord(network, containerID, ifname string) (DelegateRecord, bool, error) {
	return delegateRecords.get(s, network, containerID, ifname)
}

// DeleteDelegateRecord removes the delegate record of one attachment; a
// missing one is no error.
func (s *Store) DeleteDelegateRecord(network, containerID, ifname string) error {
	return delegateRecords.delete(s, network, containerID, ifname)
}

// DelegateRecords returns the delegate records of one network ("" = every
// network), ordered by network, container ID and ifname.
func (s *Store) DelegateRecords(network string) ([]DelegateRecord, error) {
	return delegateRecords.list(s, network)
}
