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

// Delegates is the meta roles' delegate records.
func (s *Store) Delegates() Attachments[DelegateRecord] {
	return Attachments[DelegateRecord]{s, delegateRecords, func(r *DelegateRecord) ([3]string, *time.Time, *string) {
		return [3]string{r.Network, r.ContainerID, r.IfName}, &r.Created, &r.BootID
	}}
}
