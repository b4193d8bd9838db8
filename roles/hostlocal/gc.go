package hostlocal

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/ipam"
	"github.com/cnibox/cnibox/store"
)

// gc releases every reservation of the network whose attachment is not in
// the config's cni.dev/valid-attachments (or cni.dev/attachments).
func gc(_ context.Context, a *cniplug.Args) error {
	cfg, err := loadConfig(a, loadOptions{})
	if err != nil {
		return err
	}
	// An absent list would release every address of the network: only do
	// that when the runtime says so with an empty list.
	var keys map[string]json.RawMessage
	_ = json.Unmarshal(a.StdinData, &keys)
	if _, ok := keys["cni.dev/valid-attachments"]; !ok {
		if _, ok := keys["cni.dev/attachments"]; !ok {
			return cniplug.ConfError("cni.dev/valid-attachments", "missing: GC releases every address not in this list; pass the attachments to keep ([] to release all)")
		}
	}
	type attachment struct{ containerID, ifname string }
	valid := map[attachment]bool{}
	for _, at := range a.Conf.GCKeep() {
		valid[attachment{at.ContainerID, at.IfName}] = true
	}
	keep := func(containerID, ifname string) bool { return valid[attachment{containerID, ifname}] }
	var freed []store.Reservation
	err = withStore(a, cfg, true, func(s *store.Store) error {
		return s.IPAM(cfg.Network, func(tx *store.IPAMTx) (err error) {
			freed, err = ipam.GC(tx, keep)
			return err
		})
	})
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if a.Stderr != nil {
		for _, r := range freed {
			fmt.Fprintf(a.Stderr, "cnibox host-local GC: network %q: released %s of container %s interface %s\n", cfg.Network, r.Addr, r.ContainerID, r.IfName)
		}
	}
	return nil
}
