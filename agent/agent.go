// Package agent is the overlay node agent (cnibox-agent) without its lease
// backends and its overlay backends: it leases this node's subnet through a
// lease.Manager, has its backend (agent/backend/...) create the devices and
// program every other node as their leases come and go, masquerades traffic
// leaving the cluster network, writes the subnet file and mirrors its state
// into the node's store for the vxlan role and the CLI.
//
// The kernel state is the agent's to own: at start-up, and whenever a
// device is re-created or a periodic resync runs, the backend removes
// everything that matches no current peer. Ending the agent (SIGTERM) leaves
// the kernel state in place, so pods keep their connectivity across a
// restart.
package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/cnibox/cnibox/agent/backend"
	"github.com/cnibox/cnibox/agent/lease"
	"github.com/cnibox/cnibox/agent/netconf"
	"github.com/cnibox/cnibox/netops"
)

// Defaults of Options.
const (
	DefaultSubnetFile     = "/run/flannel/subnet.env"
	DefaultRenewMargin    = time.Hour
	DefaultResyncInterval = 5 * time.Minute
	DefaultRulesResync    = 5 * time.Second

	// repairDelay lets the link events of one change arrive before the
	// device is repaired.
	repairDelay = 50 * time.Millisecond
)

// Options configure the agent.
type Options struct {
	// Manager is the lease backend (etcd or kube).
	Manager lease.Manager
	// NetConf is the network configuration; nil reads it from the Manager.
	NetConf *netconf.Config
	// Interface chooses the interface toward the other nodes and the
	// public addresses (flanneld's --iface, --iface-regex,
	// --iface-can-reach, --public-ip, --public-ipv6); call its Compile
	// first.
	Interface InterfaceOpts
	// Health, if set, is told whether the agent runs and is ready.
	Health *Health
	// NodeName is this node's name, kept with the lease in the store: a
	// stored VTEP MAC is reused only by the node that stored it.
	NodeName string
	// SubnetFile is where subnet.env is written (DefaultSubnetFile).
	SubnetFile string
	// IPMasq masquerades traffic from pods leaving the cluster network.
	IPMasq bool
	// IPMasqNotFullyRandom masquerades without fully-random ports
	// (--ip-masq-fully-random-disable).
	IPMasqNotFullyRandom bool
	// ForwardRules accepts the cluster network in the node's forward path
	// (--iptables-forward-rules).
	ForwardRules bool
	// BlackholeRoute adds a blackhole route for this node's subnet(s)
	// (--ip-blackhole-route).
	BlackholeRoute bool
	// FastPath forwards established connections from an nftables
	// flowtable (--fast-path; agent/fastpath.go); FastPathAfter is how many
	// packets a connection carries first (0: nft.DefaultFastPathAfter).
	FastPath      bool
	FastPathAfter uint64
	// RulesResync is how often the masquerade and forward rules and the
	// blackhole route are checked and restored (--iptables-resync;
	// DefaultRulesResync).
	RulesResync time.Duration
	// DataDir is the node's store directory ("" = $CNIBOX_DATA_DIR or the default).
	DataDir string
	// TxChecksumOff turns tx checksum offload off on the VXLAN device.
	TxChecksumOff bool
	// RenewMargin: the lease is renewed this long before it expires.
	RenewMargin time.Duration
	// ResyncInterval: how often the kernel state is compared with the peers
	// in full, besides reacting to every change.
	ResyncInterval time.Duration
	// FirstSynced, if set, is called once, from the agent's loop, after
	// its first successful full sync of the peers (cnibox-agent returns
	// its start-up pages then: internal/startpages).
	FirstSynced func()
	Log         *slog.Logger
}

// agent is one run. Everything but the update queue belongs to the loop
// goroutine.
type agent struct {
	o   Options
	log *slog.Logger
	h   *netops.Handle
	m   *Metrics

	cfg   *netconf.Config
	under underlay
	mtu   int
	// be is the backend of cfg.Backend.Type.
	be backend.Backend

	own      lease.Lease
	acquired time.Time
	peers    map[string]lease.Lease // by subnet key; never this node's

	ready bool
	// rulesSet: the node rules were in place once (a later change is a
	// restore worth a warning); completed: CompleteLease succeeded.
	rulesSet  bool
	completed bool
	// noFlowtables: the kernel refused the fast path's flowtable.
	noFlowtables bool
	lastSync     time.Time
	// underDown: the underlay interface went down; the kernel dropped the
	// routes through it (host-gw's, DirectRouting's), restored by a full
	// sync when it comes back.
	underDown bool
	mirrored  time.Time
	dirty     bool
	// firstSynced: Options.FirstSynced was called.
	firstSynced bool

	mu      sync.Mutex
	pending []lease.Update
	notify  chan struct{}
}

// Run runs the agent until ctx ends. It returns an error when it cannot
// start (no network configuration that works, no interface, a full cluster
// network); once running it logs and retries.
func Run(ctx context.Context, o Options) error {
	if o.Manager == nil {
		return errors.New("agent: no lease backend")
	}
	if o.SubnetFile == "" {
		o.SubnetFile = DefaultSubnetFile
	}
	if o.RenewMargin <= 0 {
		o.RenewMargin = DefaultRenewMargin
	}
	if o.ResyncInterval <= 0 {
		o.ResyncInterval = DefaultResyncInterval
	}
	if o.RulesResync <= 0 {
		o.RulesResync = DefaultRulesResync
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	unlock, err := lockDataDir(o.DataDir)
	if err != nil {
		return err
	}
	defer unlock()
	h, err := netops.Open("")
	if err != nil {
		return err
	}
	defer h.Close()
	a := &agent{o: o, log: o.Log, h: h, peers: map[string]lease.Lease{}, notify: make(chan struct{}, 1), m: o.Health.metrics()}
	o.Health.SetRunning(true)
	defer o.Health.SetRunning(false)
	defer o.Health.SetReady(false)
	defer a.m.lease(lease.Lease{}, false)
	if err := a.start(ctx); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	return a.loop(ctx)
}

// start gets the configuration and the lease, and brings the device up.
func (a *agent) start(ctx context.Context) error {
	cfg := a.o.NetConf
	if cfg == nil {
		var err error
		if cfg, err = a.o.Manager.NetworkConfig(ctx); err != nil {
			return err
		}
	}
	a.cfg = cfg
	io := a.o.Interface
	if err := a.storedPublicIPs(ctx, &io); err != nil {
		return err
	}
	under, err := findUnderlay(a.h, io, cfg.EnableIPv4, cfg.EnableIPv6)
	if err != nil {
		return err
	}
	a.under = under
	a.log.Info("starting", "backend", a.o.Manager.Name(), "network", cfg.Network, "network6", cfg.IPv6Network,
		"iface", under.Iface, "publicIP", under.Public4, "publicIPv6", under.Public6, "vni", cfg.Backend.VNI, "port", cfg.Backend.Port)

	be, err := newBackend(a.backendEnv())
	if err != nil {
		return err
	}
	a.be = be
	a.resume(ctx)
	if err := be.Prepare(a.h); err != nil {
		return err
	}
	a.mtu = be.MTU()

	prev4, prev6, err := readPreviousSubnets(a.o.SubnetFile)
	if err != nil {
		a.log.Warn("cannot read the previous subnet file", "err", err)
	}
	if !prev4.IsValid() && !prev6.IsValid() {
		if st, ok, _ := storedState(a.o.DataDir, a.deviceName()); ok {
			prev4, prev6 = st.Lease.Subnet, st.Lease.Subnet6
		}
	}
	own, err := a.acquire(ctx, prev4, prev6)
	if err != nil {
		return err
	}
	return a.takeLease(own)
}

// resume hands a backend that keeps an identity across restarts (vxlan's
// VTEP MACs) what this node published before: its lease in the lease
// backend, then the store's copy.
func (a *agent) resume(ctx context.Context) {
	r, ok := a.be.(backend.Resumer)
	if !ok {
		return
	}
	var prev []lease.Attrs
	existing, found, err := a.o.Manager.Existing(ctx, a.cfg, a.under.Public4)
	if err != nil {
		a.log.Warn("cannot look up this node's previous lease", "err", err)
	}
	if found {
		prev = append(prev, existing.Attrs)
	}
	if st, ok, _ := storedState(a.o.DataDir, a.deviceName()); ok {
		prev = append(prev, storedAttrs(st.Lease, a.under, a.o.NodeName))
	}
	r.Resume(prev...)
}

// deviceName is the store key of this overlay: the backend's first device
// (vxlan: the IPv4 one, else the IPv6 one), else the backend's type
// (host-gw, alloc).
func (a *agent) deviceName() string {
	if d := a.be.Devices(); len(d) > 0 {
		return d[0]
	}
	return a.cfg.Backend.Type
}

// enqueue is the watch callback: it queues the update for the loop.
func (a *agent) enqueue(u lease.Update) {
	a.mu.Lock()
	if u.Snapshot {
		a.pending = a.pending[:0] // a snapshot supersedes what came before
		a.m.snapshot()
	}
	a.pending = append(a.pending, u)
	a.mu.Unlock()
	select {
	case a.notify <- struct{}{}:
	default:
	}
}

// loop reacts to lease changes, device changes and timers until ctx ends.
func (a *agent) loop(ctx context.Context) error {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	watchDone := make(chan error, 1)
	go func() { watchDone <- a.o.Manager.Watch(wctx, a.enqueue) }()
	links, err := a.h.WatchLinks(wctx, func(err error) { a.log.Debug("link watch", "err", err) })
	if err != nil {
		a.log.Warn("cannot watch the device; relying on the periodic resync", "err", err)
	}

	renew := time.NewTimer(a.renewIn())
	defer renew.Stop()
	resync := time.NewTicker(a.o.ResyncInterval)
	defer resync.Stop()
	rules := time.NewTicker(a.o.RulesResync)
	defer rules.Stop()
	a.complete(ctx)
	retry := time.NewTimer(time.Hour)
	retry.Stop()
	var mirrorC <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			a.log.Info("stopping; the kernel state stays in place")
			if err := a.mirror(true); err != nil {
				a.log.Warn("cannot write the overlay state to the store", "err", err)
			}
			return nil
		case err := <-watchDone:
			if ctx.Err() == nil {
				return fmt.Errorf("the lease watch ended: %w", err)
			}
		case <-a.notify:
			if !a.applyPending(ctx) {
				retry.Reset(time.Second)
			}
		case ev, ok := <-links:
			if !ok {
				links = nil
				continue
			}
			if a.isOurs(ev.Name) && (ev.Deleted || !ev.Up) {
				// Repair once the burst of events of one change is over.
				a.log.Warn("the backend's device changed under us; repairing", "device", ev.Name, "deleted", ev.Deleted)
				retry.Reset(repairDelay)
			}
			if ev.Name == a.under.Iface {
				if !ev.Up || ev.Deleted {
					a.underDown = true
				} else if a.underDown {
					a.underDown = false
					a.log.Warn("the interface came back up; restoring the routes through it", "iface", ev.Name)
					retry.Reset(repairDelay)
				}
			}
		case <-renew.C:
			a.renew(ctx)
			renew.Reset(a.renewIn())
		case <-rules.C:
			if a.ready {
				if err := a.ensureRules(); err != nil {
					a.log.Error("cannot restore the node rules", "err", err)
				}
			}
			a.complete(ctx)
		case <-resync.C:
			if !a.fullSync() {
				retry.Reset(time.Second)
			}
		case <-retry.C:
			if !a.fullSync() {
				retry.Reset(5 * time.Second)
			}
		case <-mirrorC:
			mirrorC = nil
			if err := a.mirror(false); err != nil {
				a.log.Warn("cannot write the overlay state to the store", "err", err)
			} else {
				a.dirty = false
			}
		}
		if a.dirty && mirrorC == nil {
			mirrorC = time.After(max(mirrorSettle, mirrorDelay-time.Since(a.mirrored)))
		}
	}
}

func (a *agent) isOurs(name string) bool {
	for _, d := range a.be.Devices() {
		if d == name {
			return true
		}
	}
	return false
}

func pick[T any](v6 bool, v4v, v6v T) T {
	if v6 {
		return v6v
	}
	return v4v
}
