package cli

import (
	"io"
	"time"

	ucli "github.com/urfave/cli/v2"

	"github.com/cnibox/cnibox/store"
)

// inspectDHCP lists the dhcp daemon's leases from the store.
func inspectDHCP(c *ucli.Context) error {
	var leases []store.DHCPLease
	if err := readStore(c, func(st *store.Store) (err error) {
		leases, err = st.DHCP().List(c.String("network"))
		return err
	}); err != nil {
		return err
	}
	return show(c, nonNil(leases), printDHCPLeases, nil)
}

// printDHCPLeases prints one row per lease.
func printDHCPLeases(w io.Writer, leases []store.DHCPLease) error {
	tw := newTable(w)
	row(tw, "NETWORK", "CONTAINER", "IFNAME", "POD", "ADDRESS", "SERVER", "STATE", "LAST RENEWAL", "EXPIRES")
	for _, l := range leases {
		row(tw, l.Network, short(l.ContainerID), l.IfName, orDash(l.Pod), l.Address, l.Server, l.State,
			l.Renewed.Local().Format("2006-01-02 15:04:05"), l.Expires.Local().Format("2006-01-02 15:04:05"))
	}
	return tw.Flush()
}

// checkDHCPLeases fails for every lease the dhcp daemon let run out (or that
// is past its expiry: the daemon is not running).
func (d *doctor) checkDHCPLeases(c *ucli.Context) {
	var leases []store.DHCPLease
	if err := readStore(c, func(st *store.Store) (err error) {
		leases, err = st.DHCP().List("")
		return err
	}); err != nil || len(leases) == 0 {
		return
	}
	now := time.Now()
	bad := 0
	for _, l := range leases {
		if l.State == store.DHCPExpired || now.After(l.Expires) {
			bad++
			d.fail("dhcp lease", "is the dhcp daemon running (`systemctl status cni-dhcp`) and the DHCP server reachable from the pod's LAN? `cnibox inspect dhcp` lists the leases; DEL and ADD the pod to get a new one",
				"lease %s of %s/%s/%s (pod %s) from %s expired at %s, last renewed %s", l.Address, l.Network, short(l.ContainerID), l.IfName,
				orDash(l.Pod), l.Server, l.Expires.Local().Format(time.RFC3339), l.Renewed.Local().Format(time.RFC3339))
		}
	}
	if bad == 0 {
		d.pass("dhcp leases", "%d held and current", len(leases))
	}
}
