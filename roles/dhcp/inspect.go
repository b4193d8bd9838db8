package dhcp

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/roles/dhcp/lease"
	"github.com/cnibox/cnibox/store"
)

// What the role adds to the CLI (cniplug.Known): `cnibox inspect dhcp`,
// doctor's check of the leases, and the daemon's binary for `cnibox
// install`.

// listLeases lists the daemon's leases of network ("" = all).
func listLeases(st *store.Store, network string) (any, error) {
	leases := []lease.Lease{}
	if st == nil {
		return leases, nil
	}
	got, err := lease.Records.In(st).List(network)
	if err != nil {
		return nil, err
	}
	return append(leases, got...), nil
}

// printLeases prints one row per lease.
func printLeases(w io.Writer, v any) error {
	leases, _ := v.([]lease.Lease)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	row := func(cols ...string) { fmt.Fprintln(tw, strings.Join(cols, "\t")) }
	row("NETWORK", "CONTAINER", "IFNAME", "POD", "ADDRESS", "SERVER", "STATE", "LAST RENEWAL", "EXPIRES")
	for _, l := range leases {
		row(l.Network, l.ContainerID[:min(len(l.ContainerID), 12)], l.IfName, orDash(l.Pod), l.Address, l.Server, l.State,
			l.Renewed.Local().Format("2006-01-02 15:04:05"), l.Expires.Local().Format("2006-01-02 15:04:05"))
	}
	return tw.Flush()
}

// doctorLeases fails for every lease the daemon let run out (or that is
// past its expiry: the daemon is not running).
func doctorLeases(c *cniplug.NodeCheck) {
	if c.Store == nil {
		return
	}
	leases, err := lease.Records.In(c.Store).List("")
	if err != nil || len(leases) == 0 {
		return
	}
	now := time.Now()
	bad := 0
	for _, l := range leases {
		if l.State == lease.Expired || now.After(l.Expires) {
			bad++
			c.Fail("dhcp lease", "is the dhcp daemon running (`systemctl status cni-dhcp`) and the DHCP server reachable from the pod's LAN? `cnibox inspect dhcp` lists the leases; DEL and ADD the pod to get a new one",
				"lease %s of %s/%s/%s (pod %s) from %s expired at %s, last renewed %s", l.Address, l.Network, l.ContainerID[:min(len(l.ContainerID), 12)], l.IfName,
				orDash(l.Pod), l.Server, l.Expires.Local().Format(time.RFC3339), l.Renewed.Local().Format(time.RFC3339))
		}
	}
	if bad == 0 {
		c.Pass("dhcp leases", "%d held and current", len(leases))
	}
}

// orDash is s, or "-" when s is empty.
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
