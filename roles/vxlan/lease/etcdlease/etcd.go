// Package etcdlease is the etcd lease backend of cnibox-agent, with
// flannel's key layout so that cnibox and flannel nodes can share one etcd:
//
//	<prefix>/config                 the network configuration (net-conf.json)
//	<prefix>/subnets/10.244.1.0-24  one node's lease: flannel's LeaseAttrs JSON,
//	                                attached to an etcd lease with the TTL
//
// A lease is created only if its key is absent (one transaction); a node
// that loses the race to another picks another subnet and tries again.
//
// It links the etcd client: only cmd/cnibox-agent may import it.
package etcdlease

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/cnibox/cnibox/roles/vxlan/lease"
	"github.com/cnibox/cnibox/roles/vxlan/netconf"
)

// Defaults as in flanneld.
const (
	DefaultPrefix = "/coreos.com/network"
	DefaultTTL    = 24 * time.Hour
)

// requestTimeout bounds one etcd request.
const requestTimeout = 10 * time.Second

// maxAttempts bounds the create-if-absent attempts of one Acquire.
const maxAttempts = 200

// Config configures the etcd backend.
type Config struct {
	Endpoints []string
	Prefix    string        // default DefaultPrefix
	TTL       time.Duration // lease TTL; default DefaultTTL
	CAFile    string
	CertFile  string
	KeyFile   string
	Username  string
	Password  string
	Log       *slog.Logger
}

// Manager is the etcd lease backend.
type Manager struct {
	cli    *clientv3.Client
	prefix string
	ttl    time.Duration
	log    *slog.Logger

	leaseID clientv3.LeaseID // the etcd lease of this node's key
}

var _ lease.Manager = (*Manager)(nil)

// New connects to etcd (lazily: requests wait for the connection).
func New(c Config) (*Manager, error) {
	if len(c.Endpoints) == 0 {
		return nil, fmt.Errorf("etcd: no endpoints: set --etcd-endpoints (e.g. http://127.0.0.1:2379)")
	}
	if c.Prefix == "" {
		c.Prefix = DefaultPrefix
	}
	if c.TTL <= 0 {
		c.TTL = DefaultTTL
	}
	if c.Log == nil {
		c.Log = slog.Default()
	}
	tlsConf, err := tlsConfig(c)
	if err != nil {
		return nil, err
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   c.Endpoints,
		DialTimeout: 5 * time.Second,
		TLS:         tlsConf,
		Username:    c.Username,
		Password:    c.Password,
	})
	if err != nil {
		return nil, fmt.Errorf("etcd %v: %w", c.Endpoints, err)
	}
	return &Manager{cli: cli, prefix: lease.Trim(c.Prefix), ttl: c.TTL, log: c.Log}, nil
}

func tlsConfig(c Config) (*tls.Config, error) {
	if c.CertFile == "" && c.KeyFile == "" && c.CAFile == "" {
		return nil, nil
	}
	t := &tls.Config{MinVersion: tls.VersionTLS12}
	if c.CertFile != "" || c.KeyFile != "" {
		cert, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("etcd client certificate (--etcd-certfile %q, --etcd-keyfile %q): %w", c.CertFile, c.KeyFile, err)
		}
		t.Certificates = []tls.Certificate{cert}
	}
	if c.CAFile != "" {
		pem, err := os.ReadFile(c.CAFile)
		if err != nil {
			return nil, fmt.Errorf("etcd CA (--etcd-cafile): %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("etcd CA (--etcd-cafile %q): no PEM certificate in the file", c.CAFile)
		}
		t.RootCAs = pool
	}
	return t, nil
}

// Close closes the client. The lease stays until its TTL runs out, so a
// restarted agent finds it again.
func (m *Manager) Close() error { return m.cli.Close() }

// Name returns "etcd".
func (m *Manager) Name() string { return "etcd" }

func (m *Manager) configKey() string  { return path.Join(m.prefix, "config") }
func (m *Manager) subnetsKey() string { return path.Join(m.prefix, "subnets") + "/" }
func (m *Manager) leaseKey(l lease.Lease) string {
	return path.Join(m.prefix, "subnets", l.Key())
}

// NetworkConfig reads <prefix>/config, waiting (and saying so once) until it
// exists.
func (m *Manager) NetworkConfig(ctx context.Context) (*netconf.Config, error) {
	logged := false
	for {
		rctx, cancel := context.WithTimeout(ctx, requestTimeout)
		resp, err := m.cli.Get(rctx, m.configKey())
		cancel()
		switch {
		case err == nil && len(resp.Kvs) > 0:
			cfg, err := netconf.Parse(resp.Kvs[0].Value)
			if err != nil {
				return nil, fmt.Errorf("etcd key %s: %w", m.configKey(), err)
			}
			return cfg, nil
		case ctx.Err() != nil:
			return nil, ctx.Err()
		case !logged:
			if err == nil {
				m.log.Warn("the network configuration is not in etcd yet; waiting", "key", m.configKey(),
					"fix", fmt.Sprintf(`etcdctl put %s '{"Network": "10.244.0.0/16", "Backend": {"Type": "vxlan"}}'`, m.configKey()))
			} else {
				m.log.Warn("cannot read the network configuration from etcd; retrying", "key", m.configKey(), "err", err)
			}
			logged = true
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// entry is one lease key as listed.
type entry struct {
	lease     lease.Lease
	modRev    int64
	createRev int64
	etcdID    clientv3.LeaseID
}

// list returns every lease under <prefix>/subnets/ and the revision of the
// listing. Keys that are not leases are skipped with a warning.
func (m *Manager) list(ctx context.Context) ([]entry, int64, error) {
	rctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	resp, err := m.cli.Get(rctx, m.subnetsKey(), clientv3.WithPrefix())
	if err != nil {
		return nil, 0, fmt.Errorf("etcd: list %s: %w", m.subnetsKey(), err)
	}
	out := make([]entry, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		l, err := m.parseKV(kv)
		if err != nil {
			m.log.Warn("ignoring a lease that cannot be read", "key", string(kv.Key), "err", err)
			continue
		}
		out = append(out, entry{lease: l, modRev: kv.ModRevision, createRev: kv.CreateRevision, etcdID: clientv3.LeaseID(kv.Lease)})
	}
	return out, resp.Header.Revision, nil
}

func (m *Manager) parseKV(kv *mvccpb.KeyValue) (lease.Lease, error) {
	sn4, sn6, ok := lease.ParseSubnetKey(string(kv.Key))
	if !ok {
		return lease.Lease{}, fmt.Errorf("not a subnet key")
	}
	l := lease.Lease{Subnet: sn4, Subnet6: sn6}
	if err := json.Unmarshal(kv.Value, &l.Attrs); err != nil {
		return lease.Lease{}, fmt.Errorf("lease attributes: %w", err)
	}
	return l, nil
}

// Existing returns the lease whose PublicIP is publicIP, if any.
func (m *Manager) Existing(ctx context.Context, cfg *netconf.Config, publicIP netip.Addr) (lease.Lease, bool, error) {
	entries, _, err := m.list(ctx)
	if err != nil {
		return lease.Lease{}, false, err
	}
	if e, ok := findOwn(entries, cfg, publicIP); ok {
		return e.lease, true, nil
	}
	return lease.Lease{}, false, nil
}

// findOwn returns the lease of the node with publicIP that fits cfg.
func findOwn(entries []entry, cfg *netconf.Config, publicIP netip.Addr) (entry, bool) {
	v4, v6 := lease.Ranges(cfg)
	for _, e := range entries {
		if e.lease.Attrs.PublicIP != publicIP || !publicIP.IsValid() {
			continue
		}
		if cfg.EnableIPv4 && !v4.Network.Contains(e.lease.Subnet.Addr()) {
			continue
		}
		if cfg.EnableIPv6 && (!e.lease.Subnet6.IsValid() || !v6.Network.Contains(e.lease.Subnet6.Addr())) {
			continue
		}
		return e, true
	}
	return entry{}, false
}

// Acquire takes this node's lease: its existing one (same public IP), else
// its previous subnet if free, else a random free subnet. Creation is
// create-if-absent; a lost race picks another subnet.
func (m *Manager) Acquire(ctx context.Context, req lease.AcquireRequest) (lease.Lease, error) {
	cfg := req.Config
	v4, v6 := lease.Ranges(cfg)
	var (
		entries []entry
		taken4  = map[netip.Prefix]bool{}
		taken6  = map[netip.Prefix]bool{}
		relist  = true
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
			for _, e := range entries {
				taken4[e.lease.Subnet] = true
				taken6[e.lease.Subnet6] = true
			}
			relist = false
		}
		if own, ok := findOwn(entries, cfg, req.Attrs.PublicIP); ok {
			l, won, _, err := m.put(ctx, own.lease.Subnet, own.lease.Subnet6, req.Attrs, clientv3.Compare(clientv3.ModRevision(m.leaseKey(own.lease)), "=", own.modRev))
			if err != nil {
				return lease.Lease{}, err
			}
			if won {
				m.log.Info("renewed this node's existing lease", "subnet", l.Key(), "publicIP", req.Attrs.PublicIP)
				return l, nil
			}
			relist = true // changed under us: look again
			continue
		}

		var sn4, sn6 netip.Prefix
		if cfg.EnableIPv4 {
			if v4.Contains(req.Previous) && !taken4[req.Previous] {
				sn4 = req.Previous
			} else if p, ok := v4.PickFree(taken4); ok {
				sn4 = p
			} else {
				return lease.Lease{}, lease.FullError(v4.Network, v4.SubnetLen, len(entries), v4.Size())
			}
		}
		if cfg.EnableIPv6 {
			if v6.Contains(req.Previous6) && !taken6[req.Previous6] {
				sn6 = req.Previous6
			} else if p, ok := v6.PickFree(taken6); ok {
				sn6 = p
			} else {
				return lease.Lease{}, lease.FullError(v6.Network, v6.SubnetLen, len(entries), v6.Size())
			}
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
			relist = true
		}
		// Another node took it first: mark it and pick another.
		m.log.Info("lost the race for a subnet; picking another", "subnet", lease.SubnetKey(sn4, sn6))
		taken4[sn4], taken6[sn6] = true, true
		if sn4 == req.Previous {
			req.Previous = netip.Prefix{}
		}
		if sn6 == req.Previous6 {
			req.Previous6 = netip.Prefix{}
		}
		if attempt%16 == 15 {
			relist = true
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
// returns the revision of the write.
func (m *Manager) put(ctx context.Context, sn4, sn6 netip.Prefix, attrs lease.Attrs, conds ...clientv3.Cmp) (lease.Lease, bool, int64, error) {
	l := lease.Lease{Subnet: sn4, Subnet6: sn6, Attrs: attrs}
	value, err := json.Marshal(attrs)
	if err != nil {
		return lease.Lease{}, false, 0, err
	}
	rctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
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

// Renew refreshes the etcd lease of this node's key to the full TTL.
func (m *Manager) Renew(ctx context.Context, l lease.Lease) (lease.Lease, error) {
	rctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	resp, err := m.cli.KeepAliveOnce(rctx, m.leaseID)
	if errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return l, lease.ErrLeaseGone
	}
	if err != nil {
		return l, fmt.Errorf("etcd: renew the lease of %s: %w", l.Key(), err)
	}
	l.Expiration = time.Now().Add(time.Duration(resp.TTL) * time.Second)
	return l, nil
}

// Watch sends a snapshot of every lease, then the changes, until ctx ends.
// After a compaction or a broken watch it sends a fresh snapshot.
func (m *Manager) Watch(ctx context.Context, fn func(lease.Update)) error {
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		entries, rev, err := m.list(ctx)
		if err != nil {
			m.log.Warn("cannot list the leases; retrying", "err", err, "in", backoff)
			if !sleep(ctx, backoff) {
				break
			}
			backoff = min(2*backoff, 5*time.Second)
			continue
		}
		backoff = 100 * time.Millisecond
		snap := lease.Update{Snapshot: true, Leases: make([]lease.Lease, len(entries))}
		for i, e := range entries {
			snap.Leases[i] = e.lease
		}
		fn(snap)
		if err := m.watchFrom(ctx, rev+1, fn); err != nil && ctx.Err() == nil {
			m.log.Warn("the lease watch broke; listing again", "err", err)
			sleep(ctx, backoff)
		}
	}
	return ctx.Err()
}

// watchFrom delivers the events after rev until the watch fails.
func (m *Manager) watchFrom(ctx context.Context, rev int64, fn func(lease.Update)) error {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	// No WithPrevKV: etcd would read the previous value from its backend
	// for every watcher of every deletion; the agent knows its peers.
	for resp := range m.cli.Watch(wctx, m.subnetsKey(), clientv3.WithPrefix(), clientv3.WithRev(rev)) {
		if err := resp.Err(); err != nil {
			return err
		}
		var u lease.Update
		for _, ev := range resp.Events {
			switch ev.Type {
			case clientv3.EventTypeDelete:
				sn4, sn6, ok := lease.ParseSubnetKey(string(ev.Kv.Key))
				if !ok {
					continue
				}
				u.Events = append(u.Events, lease.Event{Type: lease.Removed, Lease: lease.Lease{Subnet: sn4, Subnet6: sn6}})
			default:
				l, err := m.parseKV(ev.Kv)
				if err != nil {
					m.log.Warn("ignoring a lease that cannot be read", "key", string(ev.Kv.Key), "err", err)
					continue
				}
				u.Events = append(u.Events, lease.Event{Type: lease.Added, Lease: l})
			}
		}
		if len(u.Events) > 0 {
			fn(u)
		}
	}
	if ctx.Err() != nil {
		return nil
	}
	return fmt.Errorf("etcd: the watch of %s ended", m.subnetsKey())
}

// sleep waits d or until ctx ends; it reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}
