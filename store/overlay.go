package store

import (
	"fmt"
	"net/netip"
	"time"
)

// Bucket overlay holds the overlay agent's view of the node: device name ->
// OverlayState as JSON. The agent (cnibox-agent) writes it; the vxlan role
// and the CLI read it, so cnibox never needs an etcd or Kubernetes client.

// OverlayLease is this node's lease of the cluster network, as the agent
// holds it.
type OverlayLease struct {
	Backend    string       `json:"backend"`        // "etcd" or "kube"
	Type       string       `json:"type,omitempty"` // the overlay backend: vxlan (also ""), host-gw, wireguard, ipip, alloc
	Node       string       `json:"node,omitempty"` // the node's name (--node-name, $NODE_NAME or the host name)
	Network    netip.Prefix `json:"network,omitzero"`
	Subnet     netip.Prefix `json:"subnet,omitzero"`
	Network6   netip.Prefix `json:"network6,omitzero"`
	Subnet6    netip.Prefix `json:"subnet6,omitzero"`
	PublicIP   netip.Addr   `json:"publicIP,omitzero"`
	PublicIPv6 netip.Addr   `json:"publicIPv6,omitzero"`
	Iface      string       `json:"iface,omitempty"`
	Device     string       `json:"device"`            // e.g. flannel.1 (host-gw, alloc: the type, no device)
	Device6    string       `json:"device6,omitempty"` // e.g. flannel-v6.1
	VNI        int          `json:"vni"`
	Port       int          `json:"port"`
	VTEPMAC    string       `json:"vtepMAC,omitempty"`
	VTEPMAC6   string       `json:"vtepMAC6,omitempty"`
	MTU        int          `json:"mtu"`
	IPMasq     bool         `json:"ipMasq"`
	SubnetFile string       `json:"subnetFile,omitempty"`
	Acquired   time.Time    `json:"acquired,omitzero"`
	Expires    time.Time    `json:"expires,omitzero"`
}

// OverlayPeer is another node of the overlay as the agent programmed it.
type OverlayPeer struct {
	Subnet     netip.Prefix `json:"subnet,omitzero"`
	Subnet6    netip.Prefix `json:"subnet6,omitzero"`
	PublicIP   netip.Addr   `json:"publicIP,omitzero"`
	PublicIPv6 netip.Addr   `json:"publicIPv6,omitzero"`
	VTEPMAC    string       `json:"vtepMAC,omitempty"`
	VTEPMAC6   string       `json:"vtepMAC6,omitempty"`
	// Direct: reached by a plain route over the underlay (DirectRouting).
	Direct bool `json:"direct,omitempty"`
}

// OverlayState is what the overlay agent last wrote about the node.
type OverlayState struct {
	Lease OverlayLease  `json:"lease"`
	Peers []OverlayPeer `json:"peers"`
	// Ready: the agent holds the lease and its device is up; pods may be added.
	Ready bool `json:"ready"`
	// LastSync is when the kernel state last matched the peers.
	LastSync time.Time `json:"lastSync,omitzero"`
	Updated  time.Time `json:"updated"`
	AgentPID int       `json:"agentPID,omitempty"`
	// Stopped is set when the agent ended (its kernel state stays in place).
	Stopped bool `json:"stopped,omitempty"`
}

// overlayRecords is the overlay bucket.
var overlayRecords = records[OverlayState]{bucket: []byte("overlay"), what: "overlay state"}

// PutOverlay records the overlay state of st.Lease.Device, replacing the
// previous one. Updated is set to now.
func (s *Store) PutOverlay(st OverlayState) error {
	if st.Lease.Device == "" {
		return fmt.Errorf("store: overlay state needs a device name")
	}
	st.Updated = time.Now()
	return overlayRecords.putKey(s, []byte(st.Lease.Device), st.Lease.Device, st)
}

// Overlay returns the recorded state of the overlay whose device is device.
func (s *Store) Overlay(device string) (st OverlayState, found bool, err error) {
	return overlayRecords.getKey(s, []byte(device))
}

// Overlays returns every recorded overlay state, ordered by device name.
func (s *Store) Overlays() ([]OverlayState, error) {
	return overlayRecords.listPrefix(s, nil)
}

// DeleteOverlay removes the recorded state of device; a missing one is no
// error.
func (s *Store) DeleteOverlay(device string) error {
	return overlayRecords.deleteKey(s, []byte(device), device)
}
