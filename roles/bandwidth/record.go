package bandwidth

import (
	"time"

	"github.com/cnibox/cnibox/store"
)

// Records are the bandwidth role's records in the store, in bucket
// bandwidth:
//
//	bandwidth/  network \x00 containerID \x00 ifname -> Record as JSON
var Records = store.Kind[Record]{Bucket: kindRecord, What: "bandwidth record", Head: recordHead}

// Record is what the bandwidth role set up on the node for one attachment:
// which host interface carries the qdiscs and which ifb device shapes the
// pod's egress. The role writes it before it creates anything, so an ifb
// of cnibox's with no record belongs to no attachment.
type Record struct {
	Network     string `json:"network"`
	ContainerID string `json:"containerID"`
	IfName      string `json:"ifName"`
	// HostIf is the host end of the pod's veth ("" when unknown).
	HostIf string `json:"hostIf,omitempty"`
	// Ifb is the ifb device for egress shaping ("" when egress is not shaped).
	Ifb string `json:"ifb,omitempty"`
	// Rates in bits per second, bursts in bits; 0 = not shaped.
	IngressRate  uint64    `json:"ingressRate,omitempty"`
	IngressBurst uint64    `json:"ingressBurst,omitempty"`
	EgressRate   uint64    `json:"egressRate,omitempty"`
	EgressBurst  uint64    `json:"egressBurst,omitempty"`
	Created      time.Time `json:"created"`
	BootID       string    `json:"bootID,omitempty"`
}

func recordHead(r *Record) (store.Attachment, *time.Time, *string) {
	return store.Attachment{Network: r.Network, ContainerID: r.ContainerID, IfName: r.IfName}, &r.Created, &r.BootID
}
