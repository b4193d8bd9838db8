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
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"

	"github.com/cnibox/cnibox/agent/lease"
	"github.com/cnibox/cnibox/agent/netconf"
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
	// reserved: this node's key is a reservation (no etcd lease, no TTL).
	reserved bool
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
		// gRPC's default backoff grows to 2 minutes between dials: an
		// agent would stay cut off that long after etcd is back.
		DialOptions: []grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 500 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: reconnectMax},
			MinConnectTimeout: 5 * time.Second,
		})},
	})
	if err != nil {
		return nil, fmt.Errorf("etcd %v: %w", c.Endpoints, err)
	}
	return &Manager{cli: cli, prefix: lease.Trim(c.Prefix), ttl: c.TTL, log: c.Log}, nil
}

// reconnectMax is the longest wait between two dials of a lost etcd.
const reconnectMax = 3 * time.Second

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

// Renew refreshes the etcd lease of this node's key to the full TTL.
func (m *Manager) Renew(ctx context.Context, l lease.Lease) (lease.Lease, error) {
	rctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	if m.reserved {
		// A reservation has no TTL to extend; it is there or gone.
		resp, err := m.cli.Get(rctx, m.leaseKey(l), clientv3.WithCountOnly())
		if err != nil {
			return l, fmt.Errorf("etcd: check the reservation %s: %w", l.Key(), err)
		}
		if resp.Count == 0 {
			return l, lease.ErrLeaseGone
		}
		return l, nil
	}
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

// Client returns the manager's etcd client (the cluster IPAM shares it).
func (m *Manager) Client() *clientv3.Client { return m.cli }
