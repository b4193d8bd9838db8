//go:build !nokube

package addrhold

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/store"
)

// Member is one node's part in the election of one Kind's addresses as a
// controller runs it (the egress gateways', agent/egress; the
// LoadBalancer announcements', agent/lbannounce): the election with its
// fence on the uplink, the node's published networks, the metrics, the
// informers' kick and the loop that drives them. The controller plans;
// the Member does the rest. Owned by the loop's goroutine but for the
// informers, which only poke it.
type Member struct {
	Node, Uplink string
	Log          *slog.Logger
	What         string // starts the log lines

	Elect *Election
	Nets  *Networks
	M     *Metrics
	// Takeovers counts the addresses this node took from another holder
	// since the agent started.
	Takeovers uint64
	// Holders are the addresses' holders as the controller last stored
	// them (Election.Step's answer).
	Holders map[netip.Addr]string
	// Dirty: an informer saw a change since the controller last planned
	// (the controller clears it).
	Dirty bool
	// Forwarding, if set, reports the changes of the node's forwarding:
	// the networks are published again at each (nil: not watched).
	Forwarding <-chan bool

	coord  rest.Interface
	kind   Kind
	leases cache.Store
	synced []cache.InformerSynced
	kick   chan struct{}
}

// MemberConfig configures NewMember.
type MemberConfig struct {
	Clients // (Connect's)
	Kind    Kind
	Uplink  string
	Host    *netops.Handle
	T       Timing
	Log     *slog.Logger
	What    string
	Metrics MetricNames
}

// NewMember makes the election of cfg.Kind's addresses on cfg.Uplink,
// counting each takeover in the metrics.
func NewMember(cfg MemberConfig) *Member {
	m := &Member{Node: cfg.Node, Uplink: cfg.Uplink, Log: cfg.Log, What: cfg.What, M: NewMetrics(cfg.Metrics),
		Holders: map[netip.Addr]string{}, coord: cfg.Coord, kind: cfg.Kind, kick: make(chan struct{}, 1)}
	leases := &Leases{C: cfg.Coord, Kind: cfg.Kind, Node: cfg.Node, Duration: int32(max(cfg.T.Lease/time.Second, 1))}
	fence := &Fence{Host: cfg.Host, Link: cfg.Uplink, T: cfg.T, Log: cfg.Log, What: cfg.What}
	m.Elect = NewElection(Config{T: cfg.T, Leases: leases, Fence: fence, Log: cfg.Log, What: cfg.What,
		OnTake: func(_ netip.Addr, _ string, lastSeen time.Time) {
			m.Takeovers++
			m.M.Took(lastSeen)
		},
		OnFailure: m.M.Failures.Inc})
	m.Nets = &Networks{Core: cfg.Core, Node: cfg.Node, Host: cfg.Host, Uplink: cfg.Uplink, Log: cfg.Log, What: cfg.What}
	return m
}

// WaitFor asks ready every second until it reports true (true) or ctx
// ends (false): what a controller does until the overlay has an uplink.
func WaitFor(ctx context.Context, ready func() bool) bool {
	for !ready() {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(time.Second):
		}
	}
	return true
}

// Register registers the metrics with register (nil: not registered).
func (m *Member) Register(register func(prometheus.Collector) error) error {
	if register == nil {
		return nil
	}
	if err := register(m.M); err != nil {
		return fmt.Errorf("%s: metrics: %w", m.What, err)
	}
	return nil
}

// Publish publishes the node's networks (Networks.Publish); when it
// cannot, it says so, and what the node goes without until it can
// (without, "" nothing).
func (m *Member) Publish(ctx context.Context, without string) {
	if err := m.Nets.Publish(ctx); err != nil {
		if without != "" {
			without = "; " + without
		}
		m.Log.Warn(m.What+": cannot publish this node's networks"+without, "err", err)
	}
}

// tick is the loop's period: the election's decisions and the fence are
// checked this often.
const tick = 50 * time.Millisecond

// Loop runs, once the informers have synced, until ctx ends, and then
// shuts the election down (the node releases what it holds). At every
// tick, change an informer saw (Dirty set), result of a Lease write,
// change of forwarding and recheck it reads the Leases and calls step;
// every recheck it publishes the networks again first, and step is told
// (rechecked).
func (m *Member) Loop(ctx context.Context, recheck time.Duration, step func(ctx context.Context, now time.Time, rechecked bool)) {
	if !cache.WaitForCacheSync(ctx.Done(), m.synced...) {
		return
	}
	m.Dirty = true
	t := time.NewTicker(tick)
	defer t.Stop()
	re := time.NewTicker(recheck)
	defer re.Stop()
	for {
		rechecked := false
		select {
		case <-ctx.Done():
			m.Elect.Shutdown()
			return
		case <-m.kick:
			m.Dirty = true
		case r := <-m.Elect.Results():
			m.Elect.Done(r)
		case _, ok := <-m.Forwarding:
			if !ok {
				// (ctx ended, or the watch failed and said so: the
				// recheck remains; nothing changed to publish)
				m.Forwarding = nil
				break
			}
			// (e.g. the bridge role turned it on with the node's first
			// pod: the node may hold addresses from now on)
			m.Publish(ctx, "")
		case <-re.C:
			m.Publish(ctx, "")
			rechecked = true
		case <-t.C:
		}
		m.Elect.Read(m.leases)
		step(ctx, time.Now(), rechecked)
	}
}

// Record sets the metric of the addresses this node holds and writes the
// node's view into the store of dataDir with put, for `cnibox inspect
// <command>`; it reports whether it wrote it, and says why not.
func (m *Member) Record(dataDir, command string, put func(*store.Store) error) bool {
	held := 0
	for _, h := range m.Holders {
		if h == m.Node {
			held++
		}
	}
	m.M.Held.Set(float64(held))
	s, err := store.Open(store.Dir(dataDir))
	if err == nil {
		err = put(s)
		s.Close()
	}
	if err != nil {
		m.Log.Warn(m.What+": cannot record the node's view for cnibox inspect "+command, "err", err)
		return false
	}
	return true
}
