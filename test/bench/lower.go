package main

import (
	"fmt"

	"github.com/cnibox/cnibox/netops"
)

// ensureLower makes the macvlan case's (and floor's) master once: lowerName
// in the node namespace, a veth whose peer is eth0 of a namespace standing
// for the LAN (removed with the others at the end). The host kernel has no
// dummy device; a veth end works as a master.
func (b *bench) ensureLower() error {
	b.lowerOnce.Do(func() {
		b.lowerErr = b.makeLower()
	})
	return b.lowerErr
}

func (b *bench) makeLower() error {
	_, path, err := b.newNS()
	if err != nil {
		return fmt.Errorf("the LAN namespace of %s: %w", lowerName, err)
	}
	host, err := netops.Open("")
	if err != nil {
		return err
	}
	defer host.Close()
	lan, err := netops.Open(path)
	if err != nil {
		return err
	}
	defer lan.Close()
	if _, _, err := host.EnsureVeth(netops.VethOpts{HostName: lowerName, PeerName: "eth0", Peer: lan}); err != nil {
		return fmt.Errorf("the macvlan master %s: %w", lowerName, err)
	}
	return nil
}
