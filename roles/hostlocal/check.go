package hostlocal

import (
	"context"
	"errors"
	"strings"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/ipam"
	"github.com/cnibox/cnibox/store"
)

// check verifies that the attachment holds an address in every range set.
func check(_ context.Context, a *cniplug.Args, cfg *config) error {
	var missing []int
	err := cfg.View(a, func(tx *store.IPAMTx) error {
		_, missing = ipam.Held(tx, a.ContainerID, a.IfName, cfg.Sets)
		return nil
	})
	if errors.Is(err, store.ErrNotFound) {
		missing = make([]int, len(cfg.Sets))
		for i := range missing {
			missing[i] = i
		}
	} else if err != nil {
		return err
	}
	if len(missing) == 0 {
		return nil
	}
	var sets []string
	for _, i := range missing {
		sets = append(sets, cfg.Sets[i].String())
	}
	return cniplug.Errorf(types.ErrUnknownContainer, "network %q: container %s interface %s holds no address in %s: its addresses were released (DEL or cnibox gc); re-create the container",
		cfg.Network, a.ContainerID, a.IfName, strings.Join(sets, "; "))
}
