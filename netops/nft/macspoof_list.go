package nft

import (
	"fmt"
	"sort"
	"strings"

	"github.com/google/nftables"
)

// MacSpoofPorts returns the ports that have a MAC spoofing check (a chain
// s-<port> in table bridge cnibox), sorted. GC uses it to find checks whose
// port is gone.
func (h *Handle) MacSpoofPorts() ([]string, error) {
	c, err := h.nftConn()
	if err != nil {
		return nil, fmt.Errorf("list mac spoof checks in %s: %w", h.where(), err)
	}
	chains, err := c.ListChainsOfTableFamily(nftables.TableFamilyBridge)
	if err != nil {
		return nil, fmt.Errorf("list mac spoof checks in %s: %w", h.where(), classify(err))
	}
	var ports []string
	for _, ch := range chains {
		if ch.Table == nil || ch.Table.Name != MasqTable {
			continue
		}
		if port, ok := strings.CutPrefix(ch.Name, MacSpoofChain("")); ok && port != "" {
			ports = append(ports, port)
		}
	}
	sort.Strings(ports)
	return ports, nil
}
