package agent

import (
	"context"
	"errors"
	"fmt"
	"net/netip"

	"github.com/cnibox/cnibox/agent/lease"
	"github.com/cnibox/cnibox/netops/nft"
)

// What the agent keeps on the node besides the overlay devices, as flanneld
// does: the masquerade (--ip-masq), the forward rules
// (--iptables-forward-rules) and the blackhole route of this node's subnet
// (--ip-blackhole-route), each checked every RulesResync and restored when
// someone removed it; and the backend's last step once the network is up
// (CompleteLease).

// ensureRules makes the masquerade, the forward rules and the blackhole
// routes match the lease; it logs what it had to restore. A masquerade
// that cannot be written is an error (flanneld stops then too); the forward
// rules and the blackhole route are logged and tried again at the next
// resync, as flanneld does.
func (a *agent) ensureRules() error {
	if err := a.ensureMasq(); err != nil {
		return err
	}
	if err := a.ensureForwardAndBlackhole(); err != nil {
		a.log.Error("cannot write the node's forward rules or blackhole route; retrying every --iptables-resync", "err", err)
	}
	if err := a.ensureFastPath(); err != nil {
		a.log.Error("cannot write the fast path; retrying every --iptables-resync", "err", err)
	}
	a.rulesSet = true
	return nil
}

// ensureMasq makes the masquerade table match the lease (or removes it).
func (a *agent) ensureMasq() error {
	if !a.o.IPMasq {
		// Remove a table left from a run with --ip-masq; look first, so a
		// resync without one commits nothing.
		if rules, err := a.h.NFT().OverlayMasq(); err == nil && rules == nil {
			return nil
		}
		return a.h.NFT().DeleteOverlayMasq()
	}
	var nets []nft.OverlayMasqNet
	if a.cfg.EnableIPv4 {
		nets = append(nets, nft.OverlayMasqNet{Network: a.cfg.Network, Subnet: a.own.Subnet})
	}
	if a.cfg.EnableIPv6 {
		nets = append(nets, nft.OverlayMasqNet{Network: a.cfg.IPv6Network, Subnet: a.own.Subnet6})
	}
	changed, err := a.h.NFT().EnsureOverlayMasq(nets, nft.OverlayMasqOpts{NotFullyRandom: a.o.IPMasqNotFullyRandom})
	if err != nil {
		return err
	}
	if changed && a.rulesSet {
		a.log.Warn("the masquerade rules were changed or removed; restored them", "table", nft.OverlayMasqTable)
	}
	return nil
}

// ensureForwardAndBlackhole writes the forward rules and the blackhole
// routes when they are missing.
func (a *agent) ensureForwardAndBlackhole() error {
	var errs []error
	if a.o.ForwardRules {
		var nets []netip.Prefix
		for _, n := range []netip.Prefix{a.cfg.Network, a.cfg.IPv6Network} {
			if n.IsValid() {
				nets = append(nets, n)
			}
		}
		changed, err := a.h.NFT().EnsureOverlayForward(nets)
		if err != nil {
			errs = append(errs, err)
		} else if changed && a.rulesSet {
			a.log.Warn("the forward rules were changed or removed; restored them", "chain", nft.OverlayForwardChain)
		}
	}
	if a.o.BlackholeRoute {
		for _, sn := range []netip.Prefix{a.own.Subnet, a.own.Subnet6} {
			if !sn.IsValid() {
				continue
			}
			added, err := a.h.EnsureBlackholeRoute(sn)
			if err != nil {
				errs = append(errs, err)
			} else if added && a.rulesSet {
				a.log.Warn("the blackhole route was removed; restored it", "subnet", sn)
			}
		}
	}
	return errors.Join(errs...)
}

// dropBlackholes removes the blackhole routes of a subnet this node no
// longer holds.
func (a *agent) dropBlackholes(old lease.Lease) {
	if !a.o.BlackholeRoute {
		return
	}
	for _, p := range [][2]netip.Prefix{{old.Subnet, a.own.Subnet}, {old.Subnet6, a.own.Subnet6}} {
		if p[0].IsValid() && p[0] != p[1] {
			if err := a.h.DeleteBlackholeRoute(p[0]); err != nil {
				a.log.Warn("cannot delete the old subnet's blackhole route", "subnet", p[0], "err", err)
			}
		}
	}
}

// complete runs the backend's last step once (retried at each rules resync
// until it succeeds).
func (a *agent) complete(ctx context.Context) {
	c, ok := a.o.Manager.(lease.Completer)
	if !ok || a.completed || !a.ready {
		return
	}
	if err := c.CompleteLease(ctx); err != nil {
		if errors.Is(err, lease.ErrNotAllowed) {
			a.log.Error("cannot complete the lease; not retrying", "err", err)
			a.completed = true
			return
		}
		a.log.Warn("cannot complete the lease; retrying", "err", err)
		return
	}
	a.completed = true
}

// storedPublicIPs lets the backend's stored public addresses (the kube
// backend's node-public-ip annotations) replace --public-ip/--public-ipv6.
func (a *agent) storedPublicIPs(ctx context.Context, o *InterfaceOpts) error {
	src, ok := a.o.Manager.(lease.PublicIPSource)
	if !ok {
		return nil
	}
	v4, v6, err := src.StoredPublicIPs(ctx)
	if err != nil {
		a.log.Warn("cannot read this node's stored public IPs", "err", err)
		return nil
	}
	for _, x := range []struct {
		name string
		s    string
		dst  *netip.Addr
		is4  bool
	}{{"node-public-ip", v4, &o.PublicIP, true}, {"node-public-ipv6", v6, &o.PublicIPv6, false}} {
		if x.s == "" {
			continue
		}
		ip, err := netip.ParseAddr(x.s)
		if err != nil || ip.Unmap().Is4() != x.is4 {
			return fmt.Errorf("this node's annotation %s %q is not an IPv%s address: fix or remove the annotation", x.name, x.s, map[bool]string{true: "4", false: "6"}[x.is4])
		}
		a.log.Info("public IP from the node's annotation", "annotation", x.name, "ip", ip.Unmap())
		*x.dst = ip.Unmap()
	}
	return nil
}
