package etcdlease

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"path"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/cnibox/cnibox/agent/lease"
)

// Acquire takes this node's lease: its existing one (same public IP), else
// its previous subnet if free, else a random free subnet. Creation is
// create-if-absent; a lost race lists the leases again and picks from what
// etcd holds. (A dual-stack write loses when either family is taken, and
// guessing which one would mark the other's free subnet taken: with few
// spare subnets a node then found the network full while it was not.)
func (m *Manager) Acquire(ctx context.Context, req lease.AcquireRequest) (lease.Lease, error) {
	cfg := req.Config
	v4, v6 := lease.Ranges(cfg)
	var (
		entries        []entry
		taken4, taken6 map[netip.Prefix]bool
		relist         = true
	)
	for attempt := 0; attempt < maxAttempts; attempt++ {
		if err := ctx.Err(); err != nil {
			return lease.Lease{}, err
		}
		if relist {
			var err error
			if entries, _, err = m.list(ctx); err != nil {
				return lease.Lease{}, err
			}
			taken4, taken6 = map[netip.Prefix]bool{}, map[netip.Prefix]bool{}
			for _, e := range entries {
				taken4[e.lease.Subnet] = true
				taken6[e.lease.Subnet6] = true
			}
			relist = false
		}
		if own, ok := findOwn(entries, cfg, req.Attrs.PublicIP); ok {
			// A key without an etcd lease is a reservation (flannel's
			// documented way to pin a node's subnet): it is updated and
			// kept without a TTL, never given one.
			m.reserved = own.etcdID == 0
			l, won, _, err := m.put(ctx, own.lease.Subnet, own.lease.Subnet6, req.Attrs, clientv3.Compare(clientv3.ModRevision(m.leaseKey(own.lease)), "=", own.modRev))
			if err != nil {
				return lease.Lease{}, err
			}
			if won {
				m.log.Info("renewed this node's existing lease", "subnet", l.Key(), "publicIP", req.Attrs.PublicIP, "reservation", m.reserved)
				return l, nil
			}
			relist = true // changed under us: look again
			continue
		}

		m.reserved = false
		sn4, err := v4.Pick(req.Previous, taken4, len(entries))
		if err != nil {
			return lease.Lease{}, err
		}
		sn6, err := v6.Pick(req.Previous6, taken6, len(entries))
		if err != nil {
			return lease.Lease{}, err
		}
		l, won, rev, err := m.put(ctx, sn4, sn6, req.Attrs, m.freeConds(sn4, sn6)...)
		if err != nil {
			return lease.Lease{}, err
		}
		if won {
			yield, err := m.yieldIPv6(ctx, l, rev)
			if err != nil {
				return lease.Lease{}, err
			}
			if !yield {
				m.log.Info("leased a subnet", "subnet", l.Key(), "publicIP", req.Attrs.PublicIP, "attempt", attempt+1)
				return l, nil
			}
		}
		// Another node took it first: look again and pick another.
		m.log.Info("lost the race for a subnet; picking another", "subnet", lease.SubnetKey(sn4, sn6))
		relist = true
		if sn4 == req.Previous {
			req.Previous = netip.Prefix{}
		}
		if sn6 == req.Previous6 {
			req.Previous6 = netip.Prefix{}
		}
	}
	return lease.Lease{}, fmt.Errorf("etcd: no lease after %d attempts: too many nodes are racing for the same subnets", maxAttempts)
}

// freeConds are the conditions under which sn4 (and sn6) are free to take:
// no key of that pair, and no lease of sn4 at all: the IPv4 subnet starts
// every key that holds it ("10.244.1.0-24", "10.244.1.0-24&fd00:..."), so
// one range compare covers the dual-stack keys. The IPv6 subnet ends its
// keys, where no range reaches: yieldIPv6 settles that after the write.
func (m *Manager) freeConds(sn4, sn6 netip.Prefix) []clientv3.Cmp {
	key := path.Join(m.prefix, "subnets", lease.SubnetKey(sn4, sn6))
	conds := []clientv3.Cmp{clientv3.Compare(clientv3.Version(key), "=", 0)}
	if sn4.IsValid() {
		v4 := path.Join(m.prefix, "subnets", lease.SubnetKey(sn4, netip.Prefix{}))
		conds = append(conds,
			clientv3.Compare(clientv3.Version(v4), "=", 0),
			clientv3.Compare(clientv3.CreateRevision(v4+"&"), "=", 0).WithPrefix())
	}
	return conds
}

// yieldIPv6 checks, after l was written at revision rev, that no other lease
// holds l's IPv6 subnet. If one created earlier does, the later lease (this
// one) gives way: its key is deleted and it reports yield, and the caller
// picks another subnet. Both nodes apply the same rule to the same order of
// creation, so exactly one keeps the subnet.
func (m *Manager) yieldIPv6(ctx context.Context, l lease.Lease, rev int64) (yield bool, err error) {
	if !l.Subnet6.IsValid() {
		return false, nil
	}
	entries, _, err := m.list(ctx)
	if err != nil {
		return false, err
	}
	key := m.leaseKey(l)
	for _, e := range entries {
		if e.lease.Subnet6 != l.Subnet6 || m.leaseKey(e.lease) == key || e.createRev > rev {
			continue
		}
		m.log.Info("another node leased the same IPv6 subnet first; giving it up", "subnet", l.Key(), "other", e.lease.Key())
		rctx, cancel := context.WithTimeout(ctx, requestTimeout)
		defer cancel()
		if _, err := m.cli.Txn(rctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", rev)).Then(clientv3.OpDelete(key)).Commit(); err != nil {
			return false, fmt.Errorf("etcd: give up %s: %w", key, err)
		}
		if _, err := m.cli.Revoke(rctx, m.leaseID); err != nil {
			m.log.Debug("revoke the given-up etcd lease", "err", err)
		}
		return true, nil
	}
	return false, nil
}

// put writes a lease with a fresh etcd lease of the TTL if conds hold, and
// returns the revision of the write. For a reservation (m.reserved) the key
// is written without an etcd lease and the Lease has no Expiration.
func (m *Manager) put(ctx context.Context, sn4, sn6 netip.Prefix, attrs lease.Attrs, conds ...clientv3.Cmp) (lease.Lease, bool, int64, error) {
	l := lease.Lease{Subnet: sn4, Subnet6: sn6, Attrs: attrs}
	value, err := json.Marshal(attrs)
	if err != nil {
		return lease.Lease{}, false, 0, err
	}
	rctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	if m.reserved {
		key := m.leaseKey(l)
		resp, err := m.cli.Txn(rctx).If(conds...).Then(clientv3.OpPut(key, string(value))).Commit()
		if err != nil {
			return lease.Lease{}, false, 0, fmt.Errorf("etcd: write %s: %w", key, err)
		}
		if !resp.Succeeded {
			return lease.Lease{}, false, 0, nil
		}
		m.leaseID = 0
		return l, true, resp.Header.Revision, nil
	}
	grant, err := m.cli.Grant(rctx, int64(m.ttl/time.Second))
	if err != nil {
		return lease.Lease{}, false, 0, fmt.Errorf("etcd: grant a lease of %s: %w", m.ttl, err)
	}
	key := m.leaseKey(l)
	resp, err := m.cli.Txn(rctx).If(conds...).Then(clientv3.OpPut(key, string(value), clientv3.WithLease(grant.ID))).Commit()
	if err != nil || !resp.Succeeded {
		if _, rerr := m.cli.Revoke(rctx, grant.ID); rerr != nil {
			m.log.Debug("revoke an unused etcd lease", "err", rerr)
		}
	}
	if err != nil {
		return lease.Lease{}, false, 0, fmt.Errorf("etcd: write %s: %w", key, err)
	}
	if !resp.Succeeded {
		return lease.Lease{}, false, 0, nil
	}
	m.leaseID = grant.ID
	l.Expiration = time.Now().Add(time.Duration(grant.TTL) * time.Second)
	return l, true, resp.Header.Revision, nil
}
