package tuning

import (
	"time"

	"github.com/cnibox/cnibox/store"
)

// Records are the tuning role's records in the store, in bucket tuning:
//
//	tuning/  network \x00 containerID \x00 ifname -> Record as JSON
var Records = store.Kind[Record]{Bucket: bucket, What: "tuning record", Head: recordHead}

// Record holds what the tuning role changed in a pod for one attachment,
// with the values from before, so that DEL can restore them. A field that
// is nil (or empty) was not changed.
type Record struct {
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

// bucket is the records' bucket; a stale record is a leftover of that
// kind too (leftovers).
const bucket = "tuning"

func recordHead(r *Record) (store.Attachment, *time.Time, *string) {
	return store.Attachment{Network: r.Network, ContainerID: r.ContainerID, IfName: r.IfName}, &r.Created, &r.BootID
}
