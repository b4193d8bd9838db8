package hostlocal

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/ipam"
	"github.com/cnibox/cnibox/store"
)

// EnvRebootReclaim set to "off" (or "0", "false") turns the reclaim after a
// reboot off for every network, like "reclaimAfterReboot": false in a
// network's ipam section.
const EnvRebootReclaim = "CNIBOX_REBOOT_RECLAIM"

// reclaimAfterReboot runs at the start of ADD's transaction. On the first ADD
// after a reboot it releases the reservations and endpoint records that
// earlier boots left behind for namespaces that are gone
// (store.IPAMTx.ReclaimAfterReboot), so that ghosts never fill a pool; a
// sticky pod coming back gets back the address kept for it. It is on unless
// the config's ipam.reclaimAfterReboot is false or $CNIBOX_REBOOT_RECLAIM is
// off.
func reclaimAfterReboot(a *cniplug.Args, tx *store.IPAMTx, req ipam.Request) error {
	if !reclaimOn(a) {
		return nil
	}
	var o store.ReclaimOptions
	got, err := tx.ReclaimAfterReboot(o)
	if err != nil {
		return err
	}
	if a.Stderr != nil && got.Ran && len(got.Released)+len(got.Deleted)+len(got.KeptSticky)+len(got.KeptAlive) > 0 {
		fmt.Fprintf(a.Stderr, "cnibox host-local: first call of boot %s: released %d addresses and %d endpoint records of earlier boots whose namespaces are gone; kept %d for sticky pods and %d whose namespaces exist\n",
			got.Boot, len(got.Released), len(got.Deleted), len(got.KeptSticky), len(got.KeptAlive))
		for _, r := range got.Released {
			fmt.Fprintf(a.Stderr, "cnibox host-local: network %q: released %s of container %s interface %s (boot %s)\n", r.Network, r.Addr, r.ContainerID, r.IfName, r.BootID)
		}
	}
	if req.Sticky && req.Pod != "" {
		if _, err := tx.ReleaseStaleSticky(req.Pod, o); err != nil {
			return err
		}
	}
	return nil
}

// allocate is ipam.Allocate, except that when the pool is exhausted it
// releases the reservations of earlier boots kept for sticky pods that have
// not come back (ghosts yield to live pods) and tries once more, in the same
// transaction.
func allocate(a *cniplug.Args, tx *store.IPAMTx, req ipam.Request) ([]ipam.Allocation, error) {
	allocs, err := ipam.Allocate(tx, req)
	if cniplug.CodeOf(err) != cniplug.CodePoolExhausted || !reclaimOn(a) {
		return allocs, err
	}
	freed, rerr := tx.ReleaseStaleSticky("", store.ReclaimOptions{})
	if rerr != nil || len(freed) == 0 {
		return allocs, err
	}
	if a.Stderr != nil {
		fmt.Fprintf(a.Stderr, "cnibox host-local: network %q is full: released %d addresses kept for sticky pods of earlier boots\n", tx.Network(), len(freed))
	}
	return ipam.Allocate(tx, req)
}

// reclaimJSON is the ipam section's reclaimAfterReboot, which reclaimOn
// decodes apart from ipamJSON (a Known.Config of the role).
type reclaimJSON struct {
	Reclaim *bool `json:"reclaimAfterReboot"`
}

// reclaimOn reports whether the reclaim after a reboot is on for this call:
// unless ipam.reclaimAfterReboot is false or $CNIBOX_REBOOT_RECLAIM is off
// ("off", "0", "false" or "no"). The parse (loadConfig) has refused a
// value that is not true or false.
func reclaimOn(a *cniplug.Args) bool {
	var raw struct {
		IPAM reclaimJSON `json:"ipam"`
	}
	if json.Unmarshal(a.StdinData, &raw) == nil && raw.IPAM.Reclaim != nil && !*raw.IPAM.Reclaim {
		return false
	}
	if a.Getenv != nil {
		switch strings.ToLower(a.Getenv(EnvRebootReclaim)) {
		case "off", "0", "false", "no":
			return false
		}
	}
	return true
}
