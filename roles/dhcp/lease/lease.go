// Package lease is the record the dhcp daemon keeps in the node's store of
// each lease it holds for a pod, so that a restarted daemon adopts it
// (renews it, releases it on DEL), `cnibox inspect dhcp` lists it and
// `cnibox doctor` checks it.
package lease

import (
	"time"

	"github.com/cnibox/cnibox/store"
)

// Records are the leases in the store, in bucket dhcp:
//
//	dhcp/  network \x00 containerID \x00 ifname -> Lease as JSON
var Records = store.Kind[Lease]{Bucket: "dhcp", What: "dhcp lease", Head: head}

// Lease states.
const (
	Bound   = "bound"   // held and renewed
	Expired = "expired" // ran out without a renewal: the pod's address is no longer the server's promise
)

// Lease is one DHCP lease the dhcp daemon holds for an attachment.
type Lease struct {
	Network     string `json:"network"`
	ContainerID string `json:"containerID"`
	IfName      string `json:"ifName"`
	Netns       string `json:"netns,omitempty"`
	Pod         string `json:"pod,omitempty"` // namespace/name from CNI_ARGS
	ClientID    string `json:"clientID"`
	Hostname    string `json:"hostname,omitempty"`
	MAC         string `json:"mac,omitempty"`
	// Address is the leased address with the subnet mask's prefix length.
	Address string `json:"address"`
	Server  string `json:"server"` // the server identifier (option 54)
	// State is Bound or Expired.
	State string `json:"state"`
	// Acquired is when the lease was first bound, Renewed when the server
	// last acknowledged it, Expires when it runs out.
	Acquired time.Time `json:"acquired"`
	Renewed  time.Time `json:"renewed"`
	Expires  time.Time `json:"expires"`
	// Request and Provide are the options the config asks for (codes) and
	// sends, kept for renewals after a restart.
	Request []int     `json:"request,omitempty"`
	Provide []Option  `json:"provide,omitempty"`
	Ack     []byte    `json:"ack"` // the server's last DHCPACK, as sent
	Created time.Time `json:"created"`
	BootID  string    `json:"bootID,omitempty"`
}

// Option is a DHCP option a client sends: its code and value.
type Option struct {
	Code  int    `json:"code"`
	Value string `json:"value"`
}

func head(l *Lease) (store.Attachment, *time.Time, *string) {
	return store.Attachment{Network: l.Network, ContainerID: l.ContainerID, IfName: l.IfName}, &l.Created, &l.BootID
}
