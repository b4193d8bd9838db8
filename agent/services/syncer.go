package services

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"runtime/debug"
	"slices"
	"time"

	"github.com/cnibox/cnibox/internal/gcburst"
	"github.com/cnibox/cnibox/internal/svcmodel"
)

// Table is the services table (netops/nft's Services): Apply writes a
// snapshot as a change from the last one applied, Resync compares the
// kernel's table with it and repairs what differs, Delete removes the
// table (idempotent).
type Table interface {
	Apply(*svcmodel.Snapshot) error
	Resync(*svcmodel.Snapshot) error
	Delete() error
}

// Checker is a Table whose periodic resync reads the kernel off the
// sync loop (netops/nft's Services): BeginCheck, on the loop, starts a
// check of the table against the snapshot applied last; run reads and
// compares, on a goroutine of its own, while changes are applied; finish,
// on the loop again, repairs what differs and no Apply wrote meanwhile
// (a resync, then), and returns it; finish(false) only releases the
// check. A Table without it is resynced on the loop (Resync).
type Checker interface {
	BeginCheck() (run func() error, finish func(repair bool) (repaired []string, err error))
}

// DefaultResync is --service-resync's default, kube-proxy's sync period.
const DefaultResync = 60 * time.Second

// Config configures a Syncer.
type Config struct {
	Table Table
	State *State
	// Resync is the period of full syncs (Table.Resync); 0: DefaultResync.
	Resync time.Duration
	// NodePortAddrs returns the node's addresses that serve NodePorts,
	// read at each sync, and whether every address does; nil: none.
	NodePortAddrs func() (addrs []netip.Addr, all bool, err error)
	// ClusterCIDRs are the pods' networks (Snapshot.ClusterCIDRs).
	ClusterCIDRs []netip.Prefix
	// ServiceCIDRs, if set, are the cluster's Service ranges
	// (Snapshot.ServiceCIDRs), read at each sync.
	ServiceCIDRs func() []netip.Prefix
	// Health (nil: one of Resync's) is told of queued changes and syncs.
	Health *ProxyHealth
	// HealthChecks (nil: none) are synced with each snapshot.
	HealthChecks *HealthChecks
	Metrics      *Metrics
	// MinBackoff and MaxBackoff bound the wait after a failed sync
	// (doubling from the first; 0: 500 ms and Resync/2).
	MinBackoff, MaxBackoff time.Duration
	Log                    *slog.Logger
	// Synced, if set, is called after each successful sync with the
	// snapshot written (tests, the first sync's bookkeeping).
	Synced func(snap *svcmodel.Snapshot, full bool)
}

// Syncer is the proxy's loop: it coalesces the changes of the State (a
// burst of events is one Apply), applies them, resyncs the whole table
// every Resync, and after a failed sync waits (backing off) and resyncs
// in full.
type Syncer struct {
	cfg  Config
	kick chan struct{}
	all  bool // the last NodePortAddrs: every address (Run's goroutine)
}

// NewSyncer returns a syncer of cfg; cfg.State's notify must call
// Trigger.
func NewSyncer(cfg Config) *Syncer {
	if cfg.Resync <= 0 {
		cfg.Resync = DefaultResync
	}
	if cfg.MinBackoff <= 0 {
		cfg.MinBackoff = 500 * time.Millisecond
	}
	if cfg.MaxBackoff <= 0 {
		cfg.MaxBackoff = max(cfg.Resync/2, cfg.MinBackoff)
	}
	if cfg.Health == nil {
		cfg.Health = NewProxyHealth(cfg.Resync)
	}
	if cfg.Health.counts == nil && cfg.Metrics != nil {
		cfg.Health.counts = cfg.Metrics.answered
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	return &Syncer{cfg: cfg, kick: make(chan struct{}, 1)}
}

// Health is the syncer's proxy health.
func (s *Syncer) Health() *ProxyHealth { return s.cfg.Health }

// Trigger says the State changed: a sync is due.
func (s *Syncer) Trigger() {
	now := time.Now()
	s.cfg.Health.QueuedUpdate()
	s.cfg.Metrics.queued(now)
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// Run syncs until ctx ends, the first sync a full one at once (call it
// once the informers hold their first lists). The table stays as the last
// sync left it.
func (s *Syncer) Run(ctx context.Context) error {
	var (
		applied  *svcmodel.Snapshot
		full     = true
		failures = 0
		resync   = time.NewTimer(s.cfg.Resync)
		retry    *time.Timer
		late     []time.Time // the trigger times of changes a failed sync did not write
		// The periodic check under way (a Checker's): its finish, its
		// start, and where its run reports.
		checking   func(bool) ([]string, error)
		checkStart time.Time
		checked    = make(chan error, 1)
	)
	defer resync.Stop()
	defer func() { // (ctx ended: the check's read ends, its connection is released)
		if checking != nil {
			<-checked
			_, _ = checking(false)
		}
	}()
	for {
		took := time.Now()
		snap, ch := s.cfg.State.snapshot()
		ch.triggers = append(late, ch.triggers...)
		late = nil
		tookSnap := time.Since(took)
		out, err := s.complete(snap)
		tookBuild := time.Since(took) - tookSnap
		wrote := err == nil && (full || !same(out, applied))
		if wrote {
			start := time.Now()
			if full {
				end := gcburst.Begin() // one transaction of every object: see gcburst
				err = s.cfg.Table.Resync(out)
				end()
			} else {
				err = s.cfg.Table.Apply(out)
			}
			if err != nil {
				err = fmt.Errorf("%s: %w", map[bool]string{true: "resync", false: "apply"}[full], err)
			}
			in, ex := noLocal(out)
			s.cfg.Metrics.synced(start, full, err == nil, ch, in, ex)
			if full && err == nil {
				// The first at Info: when the node began to serve
				// every Service (kube-proxy logs its syncs at V(2)).
				log := s.cfg.Log.Debug
				if applied == nil {
					log = s.cfg.Log.Info
				}
				log("services: full sync written", "ports", out.Len(), "took", time.Since(start).Round(time.Millisecond))
			} else if err == nil {
				// Where a change's time goes, for a debug log at 3 a.m.:
				// the snapshot, its completion, the table's write.
				s.cfg.Log.Debug("services: changes written", "ports", out.Len(), "changed", len(out.Changed),
					"snapshot", tookSnap.Round(time.Microsecond), "build", tookBuild.Round(time.Microsecond),
					"write", time.Since(start).Round(time.Microsecond))
			}
		}
		if err == nil {
			s.cfg.Health.Updated()
			if wrote && s.cfg.HealthChecks != nil {
				_ = s.cfg.HealthChecks.Sync(out, out.NodePortAddrs, s.all) // (logged there; tried again at the next write)
			}
			if wrote && s.cfg.Synced != nil {
				s.cfg.Synced(out, full)
			}
			if full {
				resync.Reset(s.cfg.Resync)
				if wrote {
					// A full sync's transaction (the first: every chain,
					// rule and element of the table in one batch) is a peak
					// of the heap that the runtime keeps from the OS for
					// minutes; what stays is the kept state.
					debug.FreeOSMemory()
				}
			}
			applied, full, failures = out, false, 0
		} else {
			late = ch.triggers
			failures++
			full = true
			wait := min(s.cfg.MinBackoff<<min(failures-1, 20), s.cfg.MaxBackoff)
			s.cfg.Log.Error("services: sync failed; a full resync follows", "err", err, "failures", failures, "retry", wait)
			retry = time.NewTimer(wait)
		}
		if retry != nil {
			select {
			case <-ctx.Done():
				retry.Stop()
				return nil
			case <-retry.C:
			}
			retry = nil
			continue // (changes meanwhile: the kick waits, and the resync takes them)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-s.kick:
		case <-resync.C:
			c, ok := s.cfg.Table.(Checker)
			if !ok || applied == nil {
				full = true
				break
			}
			run, finish := c.BeginCheck()
			checking, checkStart = finish, time.Now()
			go func() {
				// The check renders every Service's chains again, a shard
				// at a time, and reads every table (at 30,000 Services
				// some 400 MB allocated over a live heap of ~170 MB, 50 MB
				// of it the check's own at most: BenchmarkServicesCheckHeap):
				// at the agent's few MB of GC headroom that was a
				// collection every half second, whose assists fell on the
				// changes applied meanwhile (gcburst).
				end := gcburst.Begin()
				err := run()
				end()
				checked <- err
			}()
		case err := <-checked:
			finish := checking
			checking = nil
			repaired, ferr := finish(err == nil)
			if err = errors.Join(err, ferr); err != nil {
				s.cfg.Log.Error("services: the periodic check of the table failed; a full resync follows", "err", err)
				in, ex := noLocal(applied)
				s.cfg.Metrics.synced(checkStart, true, false, changes{}, in, ex)
				full = true
				break
			}
			if len(repaired) > 0 {
				s.cfg.Log.Warn("services: the table differed from the Services (someone changed it); repaired",
					"objects", len(repaired), "first", repaired[0])
			}
			in, ex := noLocal(applied)
			s.cfg.Metrics.synced(checkStart, true, true, changes{}, in, ex)
			s.cfg.Health.Updated()
			if s.cfg.Synced != nil {
				s.cfg.Synced(applied, true)
			}
			resync.Reset(s.cfg.Resync)
		}
	}
}

// complete is snap with the node's NodePort addresses, the cluster
// CIDRs and the Service ranges (a copy: snap may be the one applied last).
func (s *Syncer) complete(snap *svcmodel.Snapshot) (*svcmodel.Snapshot, error) {
	out := *snap
	out.ClusterCIDRs = s.cfg.ClusterCIDRs
	if s.cfg.ServiceCIDRs != nil {
		out.ServiceCIDRs = s.cfg.ServiceCIDRs()
	}
	s.all = false
	if s.cfg.NodePortAddrs != nil {
		addrs, all, err := s.cfg.NodePortAddrs()
		if err != nil {
			return nil, fmt.Errorf("the node's NodePort addresses: %w", err)
		}
		out.NodePortAddrs, s.all = addrs, all
	}
	return &out, nil
}

// same reports whether a and b hold the same ports (the same resolution)
// and addresses.
func same(a, b *svcmodel.Snapshot) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.SamePorts(b) && slices.Equal(a.NodePortAddrs, b.NodePortAddrs) && slices.Equal(a.ClusterCIDRs, b.ClusterCIDRs) &&
		slices.Equal(a.ServiceCIDRs, b.ServiceCIDRs)
}

// noLocal counts the ports with a Local policy and no local endpoint, by
// the traffic that policy is for (kube-proxy's
// sync_proxy_rules_no_local_endpoints_total).
func noLocal(snap *svcmodel.Snapshot) (internal, external int) {
	for p := range snap.All() {
		if len(p.LocalEndpoints) > 0 || !p.HasEndpoints {
			continue
		}
		if p.InternalLocal {
			internal++
		}
		if p.ExternalLocal && len(p.Frontends) > 1 {
			external++
		}
	}
	return internal, external
}
