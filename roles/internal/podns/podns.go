// Package podns opens a pod's network namespace, or the node's own, for the
// roles, with the CNI error a runtime expects when it cannot be opened.
package podns

import (
	"github.com/containernetworking/cni/pkg/types"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/netops"
)

// Open opens CNI_NETNS; a namespace that cannot be opened is code 3 (unknown
// container).
func Open(netns string) (*netops.Handle, error) {
	h, err := netops.Open(netns)
	if err != nil {
		return nil, cniplug.Errorf(types.ErrUnknownContainer, "open CNI_NETNS %q: %w", netns, err)
	}
	return h, nil
}

// Host opens the node's own namespace (the one the plugin runs in); a failure
// is code 5 (I/O failure).
func Host() (*netops.Handle, error) {
	h, err := netops.Open("")
	if err != nil {
		return nil, cniplug.WithCode(types.ErrIOFailure, err)
	}
	return h, nil
}
