package store

import "time"

// dhcpRecords are in bucket dhcp, which holds
// the leases the dhcp daemon holds for pods:
//
//	dhcp/  network \x00 containerID \x00 ifname -> DHCPLease as JSON
var dhcpRecords = attachmentRecords[DHCPLease]{records[DHCPLease]{bucket: []byte("dhcp"), what: "dhcp lease"}}

// DHCP lease states.
const (
	DHCPBound   = "bound"   // held and renewed
	DHCPExpired = "expired" // ran out without a renewal: the pod's address is no longer the server's promise
)

// DHCPLease is one DHCP lease the dhcp daemon holds for an attachment, kept
// so that a restarted daemon adopts it (renews it, releases it on DEL).
type DHCPLease struct {
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
	// State is DHCPBound or DHCPExpired.
	State string `json:"state"`
	// Acquired is when the lease was first bound, Renewed when the server
	// last acknowledged it, Expires when it runs out.
	Acquired time.Time `json:"acquired"`
	Renewed  time.Time `json:"renewed"`
	Expires  time.Time `json:"expires"`
	// Request and Provide are the options the config asks for (codes) and
	// sends, kept for renewals after a restart.
	Request []int        `json:"request,omitempty"`
	Provide []DHCPOption `json:"provide,omitempty"`
	Ack     []byte       `json:"ack"` // the server's last DHCPACK, as sent
	Created time.Time    `json:"created"`
	BootID  string       `json:"bootID,omitempty"`
}

// DHCPOption is a DHCP option a client sends: its code and value.
type DHCPOption struct {
	Code  int    `json:"code"`
	Value string `json:"value"`
}

// DHCP is the dhcp daemon's leases.
func (s *Store) DHCP() Attachments[DHCPLease] {
	return Attachments[DHCPLease]{s, dhcpRecords, func(l *DHCPLease) ([3]string, *time.Time, *string) {
		return [3]string{l.Network, l.ContainerID, l.IfName}, &l.Created, &l.BootID
	}}
}
