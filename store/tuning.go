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

// Tuning is the tuning role's records.
func (s *Store) Tuning() Attachments[TuningRecord] {
	return Attachments[TuningRecord]{s, tuningRecords, func(r *TuningRecord) ([3]string, *time.Time, *string) {
		return [3]string{r.Network, r.ContainerID, r.IfName}, &r.Created, &r.BootID
	}}
}
