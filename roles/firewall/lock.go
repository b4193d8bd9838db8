package firewall

import (
	"errors"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/store"
)

// lockRules takes the node's firewall lock (store.Lock "firewall", beside
// the store) for one call's reading and changing of the rules. Each call
// finds its rules by dumping CNI-FORWARD and CNI-ISOLATION over netlink,
// and the kernel resumes a dump by position: a rule another call deletes
// meanwhile shifts the rest, and the dump skips some. Without the lock,
// DELs at 32 at a time left rules of pods behind (make bench, podman's
// chain). A wait past the store's timeout is code 11, try again.
func lockRules(a *cniplug.Args) (unlock func(), err error) {
	unlock, err = store.Lock(store.DirFrom("", a.Getenv), "firewall")
	if err != nil {
		code := uint(types.ErrIOFailure)
		if errors.Is(err, store.ErrBusy) {
			code = types.ErrTryAgainLater
		}
		return nil, cniplug.Errorf(code, "firewall: %w", err)
	}
	return unlock, nil
}
