package store

import (
	"time"
)

// bandwidthRecords are in bucket bandwidth, which holds
// the bandwidth role's records:
//
//	bandwidth/  network \x00 containerID \x00 ifname -> BandwidthRecord as JSON
var bandwidthRecords = attachmentRecords[BandwidthRecord]{records[BandwidthRecord]{bucket: []byte("bandwidth"), what: "bandwidth record"}}

// BandwidthRecord is what the bandwidth role set up on the node for one
// attachment: which host interface carries the qdiscs and which ifb device
// shapes the pod's egress. The role writes it before it creates anything,
// so an ifb of cnibox's with no record belongs to no attachment.
type BandwidthRecord struct {
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

// Bandwidth is the bandwidth role's records.
func (s *Store) Bandwidth() Attachments[BandwidthRecord] {
	return Attachments[BandwidthRecord]{s, bandwidthRecords, func(r *BandwidthRecord) ([3]string, *time.Time, *string) {
		return [3]string{r.Network, r.ContainerID, r.IfName}, &r.Created, &r.BootID
	}}
}
