// Package delegaterec is the record the meta roles (flannel, multi) keep
// of what they handed to their delegates, one per attachment, in the
// node's store. The roles write it (roles/internal/delegate); cnibox-agent
// reads the multi role's to learn the addresses of this node's pods on
// their secondary networks (agent/mnp). The store keeps it as a kind a
// role declares (store.Kind) and names it nowhere.
package delegaterec

import (
	"encoding/json"
	"time"

	"github.com/cnibox/cnibox/store"
)

// Records are the delegate records in the store, in bucket delegates:
//
//	delegates/  network \x00 containerID \x00 ifname -> Record as JSON
var Records = store.Kind[Record]{Bucket: Bucket, What: "delegate record", Head: recordHead}

// Bucket is the records' bucket.
const Bucket = "delegates"

// Record is what a meta role (flannel, multi) handed to its delegates for
// one attachment, so that DEL, CHECK and GC replay exactly that instead of
// rebuilding it from files that may have changed or gone.
type Record struct {
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

func recordHead(r *Record) (store.Attachment, *time.Time, *string) {
	return store.Attachment{Network: r.Network, ContainerID: r.ContainerID, IfName: r.IfName}, &r.Created, &r.BootID
}
