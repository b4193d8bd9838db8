// Package lease defines what the overlay agent needs from a lease backend
// (etcd or Kubernetes): the network configuration, this node's lease of a
// subnet of the cluster network, and the other nodes' leases as they come
// and go. The types follow flannel's, and the JSON of Attrs is flannel's
// LeaseAttrs, so that cnibox and flannel nodes can share one etcd.
//
// This package has no dependencies beyond the standard library; the
// backends that link heavy clients live in subpackages that only
// cmd/cnibox-agent imports.
package lease

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/cnibox/cnibox/agent/netconf"
)

// Backend types as flannel publishes them in a lease. flannel's alloc
// backend publishes none ("").
const (
	BackendVXLAN     = "vxlan"
	BackendHostGW    = "host-gw"
	BackendWireGuard = "wireguard"
	BackendIPIP      = "ipip"
	BackendAlloc     = ""
)

// Attrs are what a node publishes with its lease.
type Attrs struct {
	PublicIP    netip.Addr
	PublicIPv6  netip.Addr
	BackendType string
	// VXLAN backend data, per family.
	VNI      int
	VTEPMAC  net.HardwareAddr
	VNI6     int
	VTEPMAC6 net.HardwareAddr
	// Data and Data6 are the BackendData and BackendV6Data documents as
	// published, for every backend (a vxlan lease also has them parsed
	// into VNI and VTEPMAC). A node that publishes sets them for backends
	// other than vxlan; nil is none.
	Data  json.RawMessage
	Data6 json.RawMessage
}

// DataJSON returns the backend data of one family as it is published: a
// VXLAN document when the family has a VTEP MAC, else Data (Data6), else
// nil.
func (a Attrs) DataJSON(v6 bool) json.RawMessage {
	vni, mac, data := a.VNI, a.VTEPMAC, a.Data
	if v6 {
		vni, mac, data = a.VNI6, a.VTEPMAC6, a.Data6
	}
	if len(mac) > 0 {
		b, _ := json.Marshal(VXLANData{VNI: vni, VtepMAC: mac.String()})
		return b
	}
	if len(data) == 0 || string(data) == "null" {
		return nil
	}
	return data
}

// wireAttrs is flannel's LeaseAttrs JSON.
type wireAttrs struct {
	PublicIP      string
	PublicIPv6    *string         `json:",omitempty"`
	BackendType   string          `json:",omitempty"`
	BackendData   json.RawMessage `json:",omitempty"`
	BackendV6Data json.RawMessage `json:",omitempty"`
}

// VXLANData is the vxlan backend's BackendData: {"VNI":1,"VtepMAC":"..."}.
type VXLANData struct {
	VNI     int    `json:"VNI"`
	VtepMAC string `json:"VtepMAC"`
}

// MarshalJSON writes flannel's LeaseAttrs.
func (a Attrs) MarshalJSON() ([]byte, error) {
	w := wireAttrs{BackendType: a.BackendType}
	if a.PublicIP.IsValid() {
		w.PublicIP = a.PublicIP.String()
	} else {
		w.PublicIP = "0.0.0.0"
	}
	if a.PublicIPv6.IsValid() {
		s := a.PublicIPv6.String()
		w.PublicIPv6 = &s
	}
	w.BackendData, w.BackendV6Data = a.DataJSON(false), a.DataJSON(true)
	return json.Marshal(w)
}

// UnmarshalJSON reads flannel's LeaseAttrs. Every lease keeps its backend
// data as published (Data, Data6); a vxlan lease (or one without a type)
// also has it parsed into VNI and VTEPMAC.
func (a *Attrs) UnmarshalJSON(b []byte) error {
	var w wireAttrs
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	*a = Attrs{BackendType: w.BackendType}
	if w.PublicIP != "" {
		ip, err := netip.ParseAddr(w.PublicIP)
		if err != nil {
			return fmt.Errorf("PublicIP %q: %w", w.PublicIP, err)
		}
		if !ip.IsUnspecified() {
			a.PublicIP = ip.Unmap()
		}
	}
	if w.PublicIPv6 != nil && *w.PublicIPv6 != "" {
		ip, err := netip.ParseAddr(*w.PublicIPv6)
		if err != nil {
			return fmt.Errorf("PublicIPv6 %q: %w", *w.PublicIPv6, err)
		}
		a.PublicIPv6 = ip
	}
	a.Data, a.Data6 = rawData(w.BackendData), rawData(w.BackendV6Data)
	if a.BackendType != BackendVXLAN && a.BackendType != "" {
		return nil
	}
	var err error
	if a.VNI, a.VTEPMAC, err = parseVXLANData("BackendData", w.BackendData); err != nil {
		return err
	}
	a.VNI6, a.VTEPMAC6, err = parseVXLANData("BackendV6Data", w.BackendV6Data)
	return err
}

// rawData returns a copy of b, nil for none or JSON null.
func rawData(b []byte) json.RawMessage {
	b = bytes.TrimSpace(b)
	if len(b) == 0 || string(b) == "null" {
		return nil
	}
	return append(json.RawMessage(nil), b...)
}

// SameData reports whether x and y publish the same backend data.
func SameData(x, y Attrs) bool {
	return bytes.Equal(x.DataJSON(false), y.DataJSON(false)) && bytes.Equal(x.DataJSON(true), y.DataJSON(true))
}

// ParseVXLANData decodes a vxlan BackendData document (also the value of
// flannel's backend-data node annotation).
func ParseVXLANData(b []byte) (vni int, mac net.HardwareAddr, err error) {
	return parseVXLANData("BackendData", b)
}

func parseVXLANData(field string, b json.RawMessage) (int, net.HardwareAddr, error) {
	if len(b) == 0 || string(b) == "null" {
		return 0, nil, nil
	}
	var d VXLANData
	if err := json.Unmarshal(b, &d); err != nil {
		return 0, nil, fmt.Errorf("%s: %w", field, err)
	}
	if d.VtepMAC == "" {
		return d.VNI, nil, nil
	}
	mac, err := net.ParseMAC(d.VtepMAC)
	if err != nil || len(mac) != 6 {
		return 0, nil, fmt.Errorf("%s: VtepMAC %q is not an Ethernet address", field, d.VtepMAC)
	}
	return d.VNI, mac, nil
}

// Lease is one node's lease: its subnet(s) of the cluster network and what
// it published.
type Lease struct {
	Subnet     netip.Prefix // IPv4; invalid when the network has no IPv4
	Subnet6    netip.Prefix // IPv6; invalid unless EnableIPv6
	Attrs      Attrs
	Expiration time.Time // zero when the backend does not say
}

// Key returns the lease's identity: its subnet key (flannel's etcd key).
func (l Lease) Key() string { return SubnetKey(l.Subnet, l.Subnet6) }

// String is for logs.
func (l Lease) String() string {
	s := l.Key() + " public " + l.Attrs.PublicIP.String()
	if l.Attrs.VTEPMAC != nil {
		s += " vtep " + l.Attrs.VTEPMAC.String()
	}
	return s
}

// SubnetKey returns flannel's key of a lease: "10.244.1.0-24", with
// "&fd00:10:0:1::-64" appended for a dual-stack lease.
func SubnetKey(sn4, sn6 netip.Prefix) string {
	k := ""
	if sn4.IsValid() {
		k = sn4.Addr().String() + "-" + strconv.Itoa(sn4.Bits())
	}
	if sn6.IsValid() {
		k += "&" + sn6.Addr().String() + "-" + strconv.Itoa(sn6.Bits())
	}
	return k
}

var subnetKeyRE = regexp.MustCompile(`(\d+\.\d+\.\d+\.\d+)-(\d+)(?:&([a-f\d:]+)-(\d+))?$`)

// ParseSubnetKey parses a key written by SubnetKey (or the last part of an
// etcd key path).
func ParseSubnetKey(s string) (sn4, sn6 netip.Prefix, ok bool) {
	m := subnetKeyRE.FindStringSubmatch(s)
	if m == nil {
		return netip.Prefix{}, netip.Prefix{}, false
	}
	sn4, err := netip.ParsePrefix(m[1] + "/" + m[2])
	if err != nil || !sn4.Addr().Is4() || sn4 != sn4.Masked() {
		return netip.Prefix{}, netip.Prefix{}, false
	}
	if m[3] != "" {
		sn6, err = netip.ParsePrefix(m[3] + "/" + m[4])
		if err != nil || !sn6.Addr().Is6() || sn6 != sn6.Masked() {
			return netip.Prefix{}, netip.Prefix{}, false
		}
	}
	return sn4, sn6, true
}

// EventType says what happened to a lease.
type EventType int

const (
	// Added: a lease appeared or changed.
	Added EventType = iota
	// Removed: a lease was deleted or expired.
	Removed
)

func (t EventType) String() string {
	if t == Removed {
		return "removed"
	}
	return "added"
}

// Event is a change of one lease. A Removed event may carry only the
// subnets: the receiver knows what the lease held.
type Event struct {
	Type  EventType
	Lease Lease
}

// Update is what a watch delivers: either a full snapshot of every lease
// (Snapshot true: leases absent from it are gone) or events.
type Update struct {
	Snapshot bool
	Leases   []Lease // the snapshot
	Events   []Event
}

// AcquireRequest asks for this node's lease.
type AcquireRequest struct {
	Config *netconf.Config
	Attrs  Attrs
	// Previous subnets of this node (its subnet file, the store), tried
	// first when no lease with this node's public IP exists.
	Previous  netip.Prefix
	Previous6 netip.Prefix
}

// Manager is a lease backend.
type Manager interface {
	// Name is "etcd" or "kube".
	Name() string
	// NetworkConfig returns the cluster network configuration, waiting for
	// it to exist.
	NetworkConfig(ctx context.Context) (*netconf.Config, error)
	// Existing returns this node's current lease (found by public IP in
	// etcd, by node name in Kubernetes), so a restarted agent keeps its VTEP
	// MAC; found is false when there is none.
	Existing(ctx context.Context, cfg *netconf.Config, publicIP netip.Addr) (l Lease, found bool, err error)
	// Acquire takes or renews this node's lease with the request's attributes.
	Acquire(ctx context.Context, req AcquireRequest) (Lease, error)
	// Renew extends the lease; a lease that is gone returns ErrLeaseGone.
	Renew(ctx context.Context, l Lease) (Lease, error)
	// Watch delivers the leases of every node (this one included) to fn,
	// starting with a snapshot, until ctx ends.
	Watch(ctx context.Context, fn func(Update)) error
}

// ErrLeaseGone: the lease to renew no longer exists (expired or deleted).
var ErrLeaseGone = errors.New("the lease is gone")

// ErrNetworkFull: no subnet of the cluster network is free.
var ErrNetworkFull = errors.New("no free subnet in the cluster network")

// FullError returns an ErrNetworkFull error naming the network and the count.
func FullError(network netip.Prefix, subnetLen int, leases int, possible string) error {
	return fmt.Errorf("%w: all %s subnets /%d of %s between SubnetMin and SubnetMax are leased (%d nodes hold leases): "+
		"enlarge Network or SubnetMax, or delete the leases of nodes that left", ErrNetworkFull, possible, subnetLen, network, leases)
}

// Trim is strings.TrimSuffix of a path separator, for key handling in
// backends.
func Trim(prefix string) string { return strings.TrimRight(prefix, "/") }

// ErrNotAllowed is wrapped by a backend's errors that retrying will not
// cure (the API server forbids the request).
var ErrNotAllowed = errors.New("not allowed")

// Completer is a backend with a last step once this node's lease is held
// and its device is up (flannel's CompleteLease): the kube backend sets
// the node's NetworkUnavailable condition to False there.
type Completer interface {
	CompleteLease(ctx context.Context) error
}

// PublicIPSource is a backend that may hold this node's public addresses
// as the operator set them (the kube backend: flannel's node-public-ip and
// node-public-ipv6 annotations), which win over --public-ip and
// --public-ipv6. An empty string is none.
type PublicIPSource interface {
	StoredPublicIPs(ctx context.Context) (v4, v6 string, err error)
}
