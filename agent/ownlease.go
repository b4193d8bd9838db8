package agent

import (
	"context"
	"errors"
	"net/netip"
	"time"

	"github.com/cnibox/cnibox/agent/lease"
)

// acquire gets this node's lease, retrying what may pass (the backend
// unreachable) and giving up on what will not (a full network).
func (a *agent) acquire(ctx context.Context, prev4, prev6 netip.Prefix) (lease.Lease, error) {
	req := lease.AcquireRequest{Config: a.cfg, Attrs: a.attrs(), Previous: prev4, Previous6: prev6}
	backoff := 500 * time.Millisecond
	for {
		l, err := a.o.Manager.Acquire(ctx, req)
		if err == nil {
			a.acquired = time.Now()
			return l, nil
		}
		if ctx.Err() != nil {
			return lease.Lease{}, ctx.Err()
		}
		if errors.Is(err, lease.ErrNetworkFull) {
			return lease.Lease{}, err
		}
		a.log.Warn("cannot acquire a lease; retrying", "err", err, "in", backoff)
		select {
		case <-ctx.Done():
			return lease.Lease{}, ctx.Err()
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 10*time.Second)
	}
}

// attrs are what this node publishes.
func (a *agent) attrs() lease.Attrs {
	var at lease.Attrs
	if a.cfg.EnableIPv4 {
		at.PublicIP = a.under.Public4
	}
	if a.cfg.EnableIPv6 {
		at.PublicIPv6 = a.under.Public6
	}
	a.be.Publish(&at)
	return at
}

// takeLease makes own this node's lease: device addresses, masquerade,
// subnet file, store.
func (a *agent) takeLease(own lease.Lease) error {
	changed := own.Subnet != a.own.Subnet || own.Subnet6 != a.own.Subnet6
	old := a.own
	a.own = own
	a.dropBlackholes(old)
	if err := a.be.SetLease(a.h, own); err != nil {
		return err
	}
	if err := a.ensureRules(); err != nil {
		return err
	}
	env := SubnetEnv{MTU: a.mtu, IPMasq: a.o.IPMasq, Subnet: own.Subnet, Subnet6: own.Subnet6}
	if a.cfg.EnableIPv4 {
		env.Network = a.cfg.Network
	}
	if a.cfg.EnableIPv6 {
		env.Network6 = a.cfg.IPv6Network
	}
	if err := WriteSubnetFile(a.o.SubnetFile, env); err != nil {
		return err
	}
	if changed {
		a.log.Info("holding the lease", "subnet", own.Subnet, "subnet6", own.Subnet6, "expires", own.Expiration, "subnetFile", a.o.SubnetFile, "mtu", a.mtu)
	}
	delete(a.peers, own.Key())
	a.m.lease(own, true)
	a.ready = true
	a.o.Health.SetReady(true)
	if err := a.mirror(false); err != nil {
		a.log.Warn("cannot write the overlay state to the store", "err", err)
		a.dirty = true
	}
	return nil
}

// renewIn is when the lease is renewed next.
func (a *agent) renewIn() time.Duration {
	if a.own.Expiration.IsZero() {
		return time.Hour
	}
	left := time.Until(a.own.Expiration)
	d := left - a.o.RenewMargin
	if d < left/2 {
		d = left / 2
	}
	return max(d, time.Second)
}

// renew extends the lease, or acquires it again when it is gone.
func (a *agent) renew(ctx context.Context) {
	l, err := a.o.Manager.Renew(ctx, a.own)
	switch {
	case err == nil:
		a.own = l
		a.dirty = true
		a.m.renewed(true)
		a.m.lease(l, true)
	case errors.Is(err, lease.ErrLeaseGone):
		a.m.renewed(false)
		a.m.lease(lease.Lease{}, false)
		a.log.Warn("the lease expired; acquiring it again", "subnet", a.own.Key())
		own, err := a.acquire(ctx, a.own.Subnet, a.own.Subnet6)
		if err == nil {
			err = a.takeLease(own)
		}
		if err != nil {
			a.log.Error("cannot acquire the lease again", "err", err)
		}
	default:
		a.m.renewed(false)
		a.log.Warn("cannot renew the lease; retrying", "err", err)
	}
}
