package podns

import (
	"errors"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/netops"
)

// In runs f with the namespace at netns open (code 3 when it cannot be
// opened, as Open) and closes it after.
func In(netns string, f func(pod *netops.Handle) error) error {
	pod, err := Open(netns)
	if err != nil {
		return err
	}
	defer pod.Close()
	return f(pod)
}

// InIfThere runs f, for a DEL, with the namespace at netns open when there
// is one: an empty CNI_NETNS or a namespace that is gone leaves nothing to
// do (nil); one that cannot be opened otherwise is code 5, its message led
// by role.
func InIfThere(netns, role string, f func(pod *netops.Handle) error) error {
	if netns == "" {
		return nil
	}
	pod, err := netops.Open(netns)
	if errors.Is(err, netops.ErrNotFound) {
		return nil
	}
	if err != nil {
		return cniplug.Errorf(types.ErrIOFailure, "%s: open CNI_NETNS %q: %w", role, netns, err)
	}
	defer pod.Close()
	return f(pod)
}

// InHost runs f with the node's own namespace open (code 5 when it cannot
// be opened, as Host) and closes it after.
func InHost(f func(host *netops.Handle) error) error {
	host, err := Host()
	if err != nil {
		return err
	}
	defer host.Close()
	return f(host)
}
