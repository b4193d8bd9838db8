package store

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"time"
)

// bucketCloud holds, inside ipam/<network>/, the cloud IPAM provider's last
// answer for that network under the key cloudKey, as CloudCache JSON. It
// lives next to the reservations so that a refresh and an allocation happen
// in the same transaction.
var (
	bucketCloud = []byte("cloud")
	cloudKey    = []byte("pool")
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

// CloudCache returns the cloud IPAM cache of the transaction's network. A
// cache that cannot be decoded reads as absent: the provider is asked again
// and the cache rewritten.
func (t *IPAMTx) CloudCache() (CloudCache, bool) {
	v := t.get(bucketCloud, cloudKey)
	if v == nil {
		return CloudCache{}, false
	}
	var c CloudCache
	if err := json.Unmarshal(v, &c); err != nil {
		return CloudCache{}, false
	}
	return c, true
}

// PutCloudCache replaces the cloud IPAM cache of the transaction's network.
func (t *IPAMTx) PutCloudCache(c CloudCache) error {
	v, err := json.Marshal(c)
	if err != nil {
		return fmt.Errorf("network %q: encode cloud cache: %w", t.network, err)
	}
	b, err := t.write(bucketCloud)
	if err == nil {
		err = b.Put(cloudKey, v)
	}
	if err != nil {
		return fmt.Errorf("network %q: write cloud cache: %w", t.network, err)
	}
	return nil
}
