package portmap

import (
	"net/netip"
	"time"

	"github.com/cnibox/cnibox/store"
)

// Record is what the portmap role put into the node's nftables for one
// attachment, so that DEL (without prevResult, after the netns is gone),
// CHECK and GC know exactly which elements are the attachment's.
type Record struct {
	Network     string `json:"network"`
	ContainerID string `json:"containerID"`
	IfName      string `json:"ifName"`
	// Pod is "namespace/name" from CNI_ARGS, when the runtime gave it.
	Pod      string      `json:"pod,omitempty"`
	Mappings []Entry     `json:"mappings,omitempty"`
	Masq     []MasqEntry `json:"masq,omitempty"`
	Created  time.Time   `json:"created"`
	BootID   string      `json:"bootID,omitempty"`
}

// Entry is one forwarded host port.
type Entry struct {
	Protocol string     `json:"protocol"`
	HostIP   netip.Addr `json:"hostIP,omitzero"` // zero: every local address
	HostPort uint16     `json:"hostPort"`
	PodIP    netip.Addr `json:"podIP"`
	PodPort  uint16     `json:"podPort"`
}

// MasqEntry is one pod address whose forwarded connections are
// masqueraded: from the pod itself (hairpin) and the node's localhost, or
// with All every one.
type MasqEntry struct {
	PodIP netip.Addr `json:"podIP"`
	All   bool       `json:"all,omitempty"`
}

// Records are the role's records in the store, in bucket portmaps:
//
//	portmaps/  network \x00 containerID \x00 ifname -> Record as JSON
var Records = store.Kind[Record]{Bucket: bucket, What: "portmap record", Head: recordHead}

// bucket is the records' bucket.
const bucket = "portmaps"

func recordHead(r *Record) (store.Attachment, *time.Time, *string) {
	return store.Attachment{Network: r.Network, ContainerID: r.ContainerID, IfName: r.IfName}, &r.Created, &r.BootID
}
