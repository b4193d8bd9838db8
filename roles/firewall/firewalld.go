package firewall

import (
	"context"
	"errors"
	"fmt"
	"net/netip"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/netops/firewalld"
	"github.com/cnibox/cnibox/netops/nft"
)

// firewalldFor returns a firewalld client when the config's backend is
// firewalld: "firewalld" asks for it (not running is an error with code),
// "" takes it when firewalld runs on the system bus, as the reference
// does, and nftables otherwise (nil, nil). The caller closes the client.
func firewalldFor(ctx context.Context, c *firewallConf, code uint) (*firewalld.Client, error) {
	if c.Backend == backendIptables {
		return nil, nil
	}
	fc, err := firewalld.Connect(ctx)
	if err == nil && fc.Running(ctx) {
		return fc, nil
	}
	if fc != nil {
		fc.Close()
	}
	if c.Backend == backendAuto {
		return nil, nil
	}
	return nil, errNoFirewalld(code, err)
}

// errNoFirewalld is the answer to backend "firewalld" when firewalld does
// not own its name on the system bus.
func errNoFirewalld(code uint, cause error) error {
	why := "org.fedoraproject.FirewallD1 has no owner"
	if cause != nil {
		why = cause.Error()
	}
	return cniplug.Errorf(code, `config field "backend": "firewalld": firewalld is not running on the system D-Bus (%s): start it (systemctl start firewalld), `+
		`or leave "backend" out: cnibox then writes nftables rules that hold with or without iptables`, why)
}

// needsRules reports whether the pod also needs cnibox's nftables rules
// under the firewalld backend: for ingressPolicy, which firewalld's zones
// do not express (the reference applies it with iptables whatever the
// backend).
func needsRules(c *firewallConf) bool { return c.IngressPolicy != nft.IngressOpen }

// firewalldAdd binds the pod's addresses to firewalldZone, undoing what it
// bound when a later one fails.
func firewalldAdd(ctx context.Context, fc *firewalld.Client, c *firewallConf, addrs []netip.Addr) (err error) {
	var undo cniplug.Undo
	defer undo.Finish(&err)
	for _, a := range addrs {
		if err := fc.AddSource(ctx, c.FirewalldZone, a); err != nil {
			return firewalldError(ctx, fc, c, a, err)
		}
		undo.Push(func() { _ = fc.RemoveSource(context.WithoutCancel(ctx), c.FirewalldZone, a) })
	}
	undo.Discard()
	return nil
}

// firewalldError turns firewalld's refusal into a coded error naming the
// field and the fix.
func firewalldError(ctx context.Context, fc *firewalld.Client, c *firewallConf, a netip.Addr, err error) error {
	switch {
	case errors.Is(err, firewalld.ErrInvalidZone):
		return cniplug.ConfError("firewalldZone", "%q is not a zone of firewalld (firewall-cmd --get-zones lists them): use one of those, or leave it out for %q", c.FirewalldZone, DefaultZone)
	case errors.Is(err, firewalld.ErrZoneConflict):
		other, _ := fc.ZoneOfSource(ctx, a)
		return cniplug.Errorf(types.ErrIOFailure, `config field "firewalldZone": the pod's address %s is bound to firewalld zone %q already, not %q: `+
			`remove it there (firewall-cmd --zone=%s --remove-source=%s) or set "firewalldZone" to %q`, a, other, c.FirewalldZone, other, a, other)
	case errors.Is(err, firewalld.ErrNotRunning):
		return errNoFirewalld(types.ErrIOFailure, err)
	}
	return cniplug.Errorf(types.ErrIOFailure, "firewall: %w", err)
}

// firewalldCheck verifies that each of the pod's addresses is bound to
// firewalldZone.
func firewalldCheck(ctx context.Context, fc *firewalld.Client, c *firewallConf, addrs []netip.Addr) error {
	for _, a := range addrs {
		z, err := fc.ZoneOfSource(ctx, a)
		if err != nil {
			return cniplug.Errorf(types.ErrIOFailure, "firewall CHECK: %w", err)
		}
		if z != c.FirewalldZone {
			where := "in no zone"
			if z != "" {
				where = fmt.Sprintf("in zone %q", z)
			}
			return cniplug.Errorf(types.ErrIOFailure, "firewall CHECK: the pod's address %s is not in firewalld zone %q (it is %s): ADD the pod again", a, c.FirewalldZone, where)
		}
	}
	return nil
}

// firewalldDel unbinds the addresses of prevResult from firewalldZone. With
// no prevResult there is nothing to name; with firewalld not running its
// runtime sources are gone already: both succeed.
func firewalldDel(ctx context.Context, a *cniplug.Args) error {
	c, err := cniplug.ParseForDel(a, parseConf) // an edit ADD would refuse: the zone is still read
	if err != nil || c.Backend == backendIptables {
		return nil // DEL of a config ADD refused: nothing was bound
	}
	prev, err := a.Conf.PrevResult()
	if err != nil || prev == nil {
		return nil
	}
	addrs := podAddrs(prev, a.IfName)
	if len(addrs) == 0 {
		return nil
	}
	fc, err := firewalld.Connect(ctx)
	if err != nil {
		return nil
	}
	defer fc.Close()
	if !fc.Running(ctx) {
		return nil
	}
	for _, ad := range addrs {
		if err := fc.RemoveSource(ctx, c.FirewalldZone, ad); err != nil {
			return cniplug.Errorf(types.ErrIOFailure, "firewall DEL: %w", err)
		}
	}
	return nil
}
