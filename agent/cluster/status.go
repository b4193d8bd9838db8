package cluster

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"strings"
)

// statusEntry is what the cache reads of an entry of the network-status
// annotation (Multus' format, which the multi role writes).
type statusEntry struct {
	Name      string   `json:"name"`
	Interface string   `json:"interface"`
	IPs       []string `json:"ips"`
	Default   bool     `json:"default"`
}

// ParseNetworkStatus returns the secondary attachments of a
// network-status annotation: the entries of a NetworkAttachmentDefinition
// ("<namespace>/<name>"), not the default network's. Addresses that do
// not parse are left out; an annotation that is not a JSON list is an
// error.
func ParseNetworkStatus(value string) ([]Attachment, error) {
	if value == "" {
		return nil, nil
	}
	var entries []statusEntry
	if err := json.Unmarshal([]byte(value), &entries); err != nil {
		return nil, fmt.Errorf("network-status annotation: %w", err)
	}
	var out []Attachment
	for _, e := range entries {
		if e.Default || e.Interface == "" || !strings.Contains(e.Name, "/") {
			continue
		}
		a := Attachment{Network: e.Name, Iface: e.Interface}
		for _, s := range e.IPs {
			// Multus writes bare addresses; a prefix is read too.
			s, _, _ = strings.Cut(s, "/")
			if ip, err := netip.ParseAddr(s); err == nil {
				a.IPs = append(a.IPs, ip.Unmap())
			}
		}
		out = append(out, a)
	}
	return out, nil
}
