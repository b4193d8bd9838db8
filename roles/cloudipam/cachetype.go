package cloudipam

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"time"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/store"
)

// The cloud IPAM provider's last answer for a network is kept beside the
// network's reservations (store.IPAMTx.PutKept), so that a refresh and an
// allocation happen in the same transaction:
//
//	ipam/<network>/cloud/  "pool" -> CloudCache as JSON
const (
	cacheBucket = "cloud"
	cacheKey    = "pool"
)

// CloudCache is what a cloud IPAM provider (the Azure host agent, AWS IMDS,
// a pool file) last said about this node's NICs, as cloud IPAM keeps it for
// one network, merged with what is still in use.
type CloudCache struct {
	Provider string `json:"provider"` // "azure", "aws", "file"
	Source   string `json:"source"`   // the URL or file that answered
	// Fetched is when the provider last answered; zero when it never did.
	Fetched time.Time `json:"fetched,omitzero"`
	// Attempted is when the provider was last asked, answered or not; a
	// failed query is not repeated before the query interval has passed.
	Attempted time.Time `json:"attempted,omitzero"`
	// LastError is why the last query failed ("" when it was answered).
	LastError string     `json:"lastError,omitempty"`
	NICs      []CloudNIC `json:"nics"`
}

// CloudNIC is one subnet of one of the node's NICs with the addresses the
// provider assigned to it there.
type CloudNIC struct {
	MAC    string       `json:"mac"`            // lower case hex, no colons
	Name   string       `json:"name,omitempty"` // the node's interface with that MAC
	Device int          `json:"device,omitempty"`
	Subnet netip.Prefix `json:"subnet"`
	// Primary addresses belong to the node and are never handed out.
	Primary []netip.Addr `json:"primary,omitempty"`
	// Addrs are the secondary addresses pods may get.
	Addrs []netip.Addr `json:"addrs,omitempty"`
	// Vanished are addresses the provider no longer lists that a pod still
	// holds; they are dropped when released, never handed out again.
	Vanished []netip.Addr `json:"vanished,omitempty"`
}

// CacheOf returns the cloud IPAM cache of the transaction's network. A
// cache that cannot be decoded reads as absent: the provider is asked again
// and the cache rewritten.
func CacheOf(tx *store.IPAMTx) (CloudCache, bool) {
	return decodeCache(tx.Kept(cacheBucket, cacheKey))
}

// decodeCache decodes a kept cache (nil: none).
func decodeCache(v []byte) (CloudCache, bool) {
	if v == nil {
		return CloudCache{}, false
	}
	var c CloudCache
	if err := json.Unmarshal(v, &c); err != nil {
		return CloudCache{}, false
	}
	return c, true
}

// PutCache replaces the cloud IPAM cache of the transaction's network.
func PutCache(tx *store.IPAMTx, c CloudCache) error {
	v, err := json.Marshal(c)
	if err != nil {
		return fmt.Errorf("encode cloud cache: %w", err)
	}
	return tx.PutKept(cacheBucket, cacheKey, v)
}

// keptPools are the cache's NICs as pools, for `cnibox inspect ipam`
// (cniplug.Known.KeptPools): one per NIC, its secondary addresses.
func keptPools(kept map[string][]byte) []cniplug.KeptPool {
	c, ok := decodeCache(kept[cacheBucket+"/"+cacheKey])
	if !ok {
		return nil
	}
	var out []cniplug.KeptPool
	for _, nic := range c.NICs {
		name := "nic " + nic.MAC
		if nic.Name != "" {
			name += " (" + nic.Name + ")"
		}
		out = append(out, cniplug.KeptPool{Range: name, Subnet: nic.Subnet, Source: "cloud " + c.Provider + " " + c.Source,
			Refreshed: c.Fetched, LastError: c.LastError, Addrs: nic.Addrs})
	}
	return out
}
