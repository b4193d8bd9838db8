package store

import (
	"net/netip"
	"time"
)

// Endpoint is what a role set up for one attachment, kept for a person
// debugging the node (`cnibox` CLI). Roles write it after a successful ADD.
type Endpoint struct {
	Network      string `json:"network"`
	ContainerID  string `json:"containerID"`
	IfName       string `json:"ifName"`
	Netns        string `json:"netns,omitempty"`
	PodNamespace string `json:"podNamespace,omitempty"`
	PodName      string `json:"podName,omitempty"`
	PodUID       string `json:"podUID,omitempty"`
	// Plugin is the role type, e.g. "bridge".
	Plugin   string         `json:"plugin,omitempty"`
	Bridge   string         `json:"bridge,omitempty"`
	HostVeth string         `json:"hostVeth,omitempty"`
	MAC      string         `json:"mac,omitempty"`
	IPs      []netip.Prefix `json:"ips,omitempty"`
	Gateways []netip.Addr   `json:"gateways,omitempty"`
	Routes   []Route        `json:"routes,omitempty"`
	DNS      DNS            `json:"dns,omitzero"`
	// Created is filled in by PutEndpoint; zero only in an endpoint not
	// recorded yet (nodestate.Recovered).
	Created time.Time `json:"created,omitzero"`
	BootID  string    `json:"bootID,omitempty"`
	// Extra holds role-specific facts.
	Extra map[string]string `json:"extra,omitempty"`
}

// Route is a route given to the container.
type Route struct {
	Dst netip.Prefix `json:"dst"`
	GW  netip.Addr   `json:"gw,omitzero"`
}

// DNS is the DNS configuration given to the container.
type DNS struct {
	Nameservers []string `json:"nameservers,omitempty"`
	Domain      string   `json:"domain,omitempty"`
	Search      []string `json:"search,omitempty"`
	Options     []string `json:"options,omitempty"`
}

func endpointKey(network, containerID, ifname string) []byte {
	k := make([]byte, 0, len(network)+len(containerID)+len(ifname)+2)
	k = append(k, network...)
	k = append(k, sep)
	k = append(k, containerID...)
	k = append(k, sep)
	return append(k, ifname...)
}

// endpointRecords is the endpoints bucket.
var endpointRecords = attachmentRecords[Endpoint]{records[Endpoint]{bucket: []byte("endpoints"), what: "endpoint record"}}

// PutEndpoint records e (replacing an earlier record of the same attachment).
// Created and BootID are filled in when zero.
func (s *Store) PutEndpoint(e Endpoint) error {
	stamp(&e.Created, &e.BootID, time.Now())
	return endpointRecords.put(s, e.Network, e.ContainerID, e.IfName, e)
}

// GetEndpoint returns the record of one attachment.
func (s *Store) GetEndpoint(network, containerID, ifname string) (e Endpoint, found bool, err error) {
	return endpointRecords.get(s, network, containerID, ifname)
}

// DeleteEndpoint removes the record of one attachment; a missing one is no
// error.
func (s *Store) DeleteEndpoint(network, containerID, ifname string) error {
	return endpointRecords.delete(s, network, containerID, ifname)
}

// Endpoints returns the records of one network ("" = every network), ordered
// by network, container ID and ifname.
func (s *Store) Endpoints(network string) ([]Endpoint, error) {
	return endpointRecords.list(s, network)
}
