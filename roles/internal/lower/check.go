package lower

import (
	"context"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/roles/internal/attach"
)

// Check is the CHECK of a device of c's kind on a master: the attachment
// against prevResult: the master exists, the pod's device is of the kind
// and mode of the config, up, with the MAC, addresses and routes of the
// ADD result.
func Check(ctx context.Context, a *cniplug.Args, c *Conf) error {
	s := c.spec
	if _, err := s.fromPrev(a, c); err != nil {
		return err
	}
	prev, podIdx, err := attach.Prev(ctx, a)
	if err != nil {
		return err
	}
	pod, _, closeNS, err := s.open(a, c)
	if err != nil {
		return err
	}
	defer closeNS()
	l, err := checkDevice(pod, a, s.Kind, prev, podIdx)
	if err != nil {
		return err
	}
	if l.Mode != c.Mode {
		return cniplug.Errorf(types.ErrIOFailure, "%s %q in the pod is in mode %q, the config says %q", s.Kind, a.IfName, l.Mode, c.Mode)
	}
	return nil
}
