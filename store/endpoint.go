package store

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/netip"
	"time"

	bolt "go.etcd.io/bbolt"
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
	Created  time.Time      `json:"created"`
	BootID   string         `json:"bootID,omitempty"`
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

// PutEndpoint records e (replacing an earlier record of the same attachment).
// Created and BootID are filled in when zero.
func (s *Store) PutEndpoint(e Endpoint) error {
	if e.Network == "" || e.ContainerID == "" || e.IfName == "" {
		return fmt.Errorf("store: endpoint needs network, container ID and ifname (got %q, %q, %q)", e.Network, e.ContainerID, e.IfName)
	}
	if e.Created.IsZero() {
		e.Created = time.Now()
	}
	if e.BootID == "" {
		e.BootID = BootID()
	}
	v, err := json.Marshal(e)
	if err != nil {
		return fmt.Errorf("store: encode endpoint %s/%s/%s: %w", e.Network, e.ContainerID, e.IfName, err)
	}
	return s.update(func(tx *bolt.Tx) (bool, error) {
		b, err := tx.CreateBucketIfNotExists(bucketEndpoints)
		if err == nil {
			err = b.Put(endpointKey(e.Network, e.ContainerID, e.IfName), v)
		}
		if err != nil {
			return false, fmt.Errorf("store: put endpoint %s/%s/%s: %w", e.Network, e.ContainerID, e.IfName, err)
		}
		return true, nil
	})
}

// GetEndpoint returns the record of one attachment.
func (s *Store) GetEndpoint(network, containerID, ifname string) (e Endpoint, found bool, err error) {
	err = s.view(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketEndpoints)
		if b == nil {
			return nil
		}
		v := b.Get(endpointKey(network, containerID, ifname))
		if v == nil {
			return nil
		}
		found = true
		return s.decodeEndpoint(v, &e)
	})
	return e, found, err
}

// DeleteEndpoint removes the record of one attachment; a missing one is no
// error.
func (s *Store) DeleteEndpoint(network, containerID, ifname string) error {
	return s.update(func(tx *bolt.Tx) (bool, error) {
		b := tx.Bucket(bucketEndpoints)
		k := endpointKey(network, containerID, ifname)
		if b == nil || b.Get(k) == nil {
			return false, nil
		}
		return true, b.Delete(k)
	})
}

// Endpoints returns the records of one network ("" = every network), ordered
// by network, container ID and ifname.
func (s *Store) Endpoints(network string) ([]Endpoint, error) {
	var out []Endpoint
	err := s.view(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketEndpoints)
		if b == nil {
			return nil
		}
		var prefix []byte
		if network != "" {
			prefix = append([]byte(network), sep)
		}
		c := b.Cursor()
		k, v := c.First()
		if prefix != nil {
			k, v = c.Seek(prefix)
		}
		for ; k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
			var e Endpoint
			if err := s.decodeEndpoint(v, &e); err != nil {
				return err
			}
			out = append(out, e)
		}
		return nil
	})
	return out, err
}

func (s *Store) decodeEndpoint(v []byte, e *Endpoint) error {
	if err := json.Unmarshal(v, e); err != nil {
		return fmt.Errorf("store %s: endpoint record: %w: %v", s.path, ErrCorrupt, err)
	}
	return nil
}
