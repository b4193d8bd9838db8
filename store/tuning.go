package store

import (
	"time"
)

// tuningRecords are in bucket tuning, which holds
// the tuning role's records:
//
//	tuning/  network \x00 containerID \x00 ifname -> TuningRecord as JSON
var tuningRecords = attachmentRecords[TuningRecord]{records[TuningRecord]{bucket: []byte("tuning"), what: "tuning record"}}

// TuningRecord holds what the tuning role changed in a pod for one
// attachment, with the values from before, so that DEL can restore them. A
// field that is nil (or empty) was not changed.
type TuningRecord struct {
	Network     string `json:"network"`
	ContainerID string `json:"containerID"`
	IfName      string `json:"ifName"`
	Netns       string `json:"netns,omitempty"`
	// Sysctls are the previous values, in the order they were changed; Key
	// is the path under /proc/sys with the interface name already in it.
	Sysctls  []SysctlValue `json:"sysctls,omitempty"`
	MAC      string        `json:"mac,omitempty"`
	MTU      int           `json:"mtu,omitempty"`
	Promisc  *bool         `json:"promisc,omitempty"`
	Allmulti *bool         `json:"allmulti,omitempty"`
	TxQLen   *int          `json:"txQLen,omitempty"`
	Created  time.Time     `json:"created"`
	BootID   string        `json:"bootID,omitempty"`
}

// SysctlValue is one sysctl and its value.
type SysctlValue struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

// PutTuning records r, replacing an earlier record of the same attachment.
// Created and BootID are filled in when zero.
func (s *Store) PutTuning(r TuningRecord) error {
	stamp(&r.Created, &r.BootID, time.Now().UTC())
	return tuningRecords.put(s, r.Network, r.ContainerID, r.IfName, r)
}

// GetTuning returns the tuning record of one attachment.
func (s *Store) GetTuning(network, containerID, ifname string) (TuningRecord, bool, error) {
	return tuningRecords.get(s, network, containerID, ifname)
}

// DeleteTuning removes the tuning record of one attachment; a missing one is
// no error.
func (s *Store) DeleteTuning(network, containerID, ifname string) error {
	return tuningRecords.delete(s, network, containerID, ifname)
}

// TuningRecords returns the tuning records of one network ("" = every
// network), ordered by network, container ID and ifname.
func (s *Store) TuningRecords(network string) ([]TuningRecord, error) {
	return tuningRecords.list(s, network)
}
