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

// PutBandwidth records r, replacing an earlier record of the same
// attachment. Created and BootID are filled in when zero.
func (s *Store) PutBandwidth(r BandwidthRecord) error {
	stamp(&r.Created, &r.BootID, time.Now().UTC())
	return bandwidthRecords.put(s, r.Network, r.ContainerID, r.IfName, r)
}

// GetBandwidth returns the bandwidth record of one attachment.
func (s *Store) GetBandwidth(network, containerID, ifname string) (BandwidthRecord, bool, error) {
	return bandwidthRecords.get(s, network, containerID, ifname)
}

// DeleteBandwidth removes the bandwidth record of one attachment; a missing
// one is no error.
func (s *Store) DeleteBandwidth(network, containerID, ifname string) error {
	return bandwidthRecords.delete(s, network, containerID, ifname)
}

// BandwidthRecords returns the bandwidth records of one network ("" = every
// network), ordered by network, container ID and ifname.
func (s *Store) BandwidthRecords(network string) ([]BandwidthRecord, error) {
	return bandwidthRecords.list(s, network)
}
