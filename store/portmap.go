package store

import (
	"net/netip"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Bucket portmaps holds the portmap role's records:
//
//	portmaps/  network \x00 containerID \x00 ifname -> PortMapRecord as JSON

// PortMapRecord is what the portmap role put into the node's nftables for one
// attachment, so that DEL (without prevResult, after the netns is gone),
// CHECK and GC know exactly which elements are the attachment's.
type PortMapRecord struct {
	Network     string `json:"network"`
	ContainerID string `json:"containerID"`
	IfName      string `json:"ifName"`
	// Pod is "namespace/name" from CNI_ARGS, when the runtime gave it.
	Pod      string          `json:"pod,omitempty"`
	Mappings []PortMapEntry  `json:"mappings,omitempty"`
	Masq     []PortMasqEntry `json:"masq,omitempty"`
	Created  time.Time       `json:"created"`
	BootID   string          `json:"bootID,omitempty"`
}

// PortMapEntry is one forwarded host port.
type PortMapEntry struct {
	Protocol string     `json:"protocol"`
	HostIP   netip.Addr `json:"hostIP,omitzero"` // zero: every local address
	HostPort uint16     `json:"hostPort"`
	PodIP    netip.Addr `json:"podIP"`
	PodPort  uint16     `json:"podPort"`
}

// PortMasqEntry is one pod address whose forwarded connections are
// masqueraded: from the pod itself (hairpin) and the node's localhost, or
// with All every one.
type PortMasqEntry struct {
	PodIP netip.Addr `json:"podIP"`
	All   bool       `json:"all,omitempty"`
}

// PortMapTx is one transaction on the portmap records.
type PortMapTx struct {
	s       *Store
	tx      *bolt.Tx
	changed bool
}

// UpdatePortMaps runs fn in one read-write transaction on the portmap
// records; it commits only when fn changed something and returned nil.
func (s *Store) UpdatePortMaps(fn func(tx *PortMapTx) error) error {
	return s.update(func(tx *bolt.Tx) (bool, error) {
		t := &PortMapTx{s: s, tx: tx}
		err := fn(t)
		return t.changed, err
	})
}

// ViewPortMaps runs fn in one read-only transaction on the portmap records.
func (s *Store) ViewPortMaps(fn func(tx *PortMapTx) error) error {
	return s.view(func(tx *bolt.Tx) error { return fn(&PortMapTx{s: s, tx: tx}) })
}

// portMapRecords is the portmaps bucket.
var portMapRecords = attachmentRecords[PortMapRecord]{records[PortMapRecord]{bucket: []byte("portmaps"), what: "portmap record"}}

// Get returns the record of one attachment.
func (t *PortMapTx) Get(network, containerID, ifname string) (r PortMapRecord, found bool, err error) {
	return portMapRecords.getTx(t.s, t.tx, endpointKey(network, containerID, ifname))
}

// Put records r, replacing an earlier record of the same attachment. Created
// and BootID are filled in when zero.
func (t *PortMapTx) Put(r PortMapRecord) error {
	key, name, err := portMapRecords.attachment(r.Network, r.ContainerID, r.IfName)
	if err != nil {
		return err
	}
	stamp(&r.Created, &r.BootID, time.Now())
	v, err := portMapRecords.encode(name, r)
	if err == nil {
		err = portMapRecords.putTx(t.tx, key, name, v)
	}
	if err != nil {
		return err
	}
	t.changed = true
	return nil
}

// Delete removes the record of one attachment; a missing one is no error.
func (t *PortMapTx) Delete(network, containerID, ifname string) error {
	deleted, err := portMapRecords.deleteTx(t.tx, endpointKey(network, containerID, ifname), attachmentName(network, containerID, ifname))
	t.changed = t.changed || deleted
	return err
}

// List returns the records of one network ("" = every network), ordered by
// network, container ID and ifname.
func (t *PortMapTx) List(network string) ([]PortMapRecord, error) {
	return portMapRecords.listTx(t.s, t.tx, networkPrefix(network))
}
