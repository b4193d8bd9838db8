package firewall

import (
	"errors"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/store"
)

// lockRules takes the node's firewall lock (store.Lock "firewall", beside
// the store). ADD and DEL of the maps' elements need none (each is a
// single-element message the kernel orders); netops takes it, through
// FirewallRules.Lock, only around what reads a chain and then writes it:
// making the fixed rules (two first ADDs would both insert iptables'
// jumps) and removing the older layout's per-pod rules, found by dumping
// CNI-FORWARD, which the kernel resumes by position (a rule deleted by
// another call meanwhile made a dump skip rules: DELs at 32 at a time left
// rules behind before the lock). A wait past the store's timeout is code
// 11, try again.
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
