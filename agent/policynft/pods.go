package policynft

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"

	"github.com/cnibox/cnibox/netops/nft"
)

// The MultiNetworkPolicy input. agent/mnp resolves, per pod of the node
// with secondary networks, the table its policies make in the pod's own
// network namespace (netops/nft's MultiTable); the Syncer writes them on
// the loop that commits the node's table, with the same retries and the
// same periodic resync. A pod's table is written when it differs from
// the one last written (compared by content: an unrelated change writes
// nothing), when the last write failed, and at each resync, which applies
// every one again whatever the Syncer thinks it wrote. Applying is
// netops/nft's reconcile: the pod's table is compared with its kernel's,
// so a table someone flushed, a rule or chain deleted, the table gone,
// are put back then, and a table as wanted is left alone (no
// transaction).

// PodTable is what one pod's MultiNetworkPolicy table should be.
type PodTable struct {
	// Netns is the path of the pod's network namespace.
	Netns string
	// Policy is the table (nil, or nothing isolated: none).
	Policy *nft.PodPolicy
	// Err, if set, is why the pod's namespace is not known: the table is
	// tried again after a wait, and at the next change.
	Err error
}

// PodSource returns the table of each pod of the node that a
// MultiNetworkPolicy may isolate (those with secondary networks), by
// "<namespace>/<name>"; a pod it leaves out is forgotten (its namespace
// went with it). Run calls it, outside the Syncer's locks, when the pods
// changed (PodTablesChanged), a write failed, or the resync is due.
type PodSource func() map[string]PodTable

// podTables is the Syncer's pod side (under pmu).
type podTables struct {
	pmu     sync.Mutex // one pod write at a time (Run's, Admit's)
	src     PodSource
	open    func(path string) (*nft.Handle, error)
	applied map[string]string // by pod: the table last written (podFingerprint); absent: not known
}

func newPodTables() podTables {
	return podTables{open: nft.Open, applied: map[string]string{}}
}

// SetPodSource makes the Syncer keep the pods' tables to src (nil: stop),
// from now: every pod's table is written at the next sync.
func (s *Syncer) SetPodSource(src PodSource) {
	s.pods.pmu.Lock()
	s.pods.src = src
	s.pods.pmu.Unlock()
	s.PodTablesChanged()
}

// PodTablesChanged tells the Syncer that the pods' tables may have
// changed: Run asks the source at its next sync (a source may call it
// with its own lock held: nothing is asked before it returns).
func (s *Syncer) PodTablesChanged() {
	s.qmu.Lock()
	s.q.pods = true
	s.qmu.Unlock()
	s.wake()
}

// ApplyPodTable writes pod key's table t at once unless it is the one
// written last (a pod whose table is not known has none: its namespace is
// new), and returns the write's error: a CNI ADD's pod isolated before the
// ADD returns (agent/mnp's Admit).
func (s *Syncer) ApplyPodTable(key string, t PodTable) error {
	s.pods.pmu.Lock()
	defer s.pods.pmu.Unlock()
	fp := podFingerprint(t.Policy)
	if s.pods.applied[key] == fp {
		s.pods.applied[key] = fp
		return nil
	}
	if err := s.writePod(key, t); err != nil {
		delete(s.pods.applied, key)
		return err
	}
	s.pods.applied[key] = fp
	return nil
}

// syncPods writes the pod tables that changed (every one when the resync
// queued it), if the source changed. It returns every write's failure;
// the failed pods are written at the next sync (Run tries again after a
// wait).
func (s *Syncer) syncPods(log *slog.Logger) error {
	s.qmu.Lock()
	do, all := s.q.takePods()
	s.qmu.Unlock()
	if !do {
		return nil
	}
	s.pods.pmu.Lock()
	src := s.pods.src
	s.pods.pmu.Unlock()
	if src == nil {
		return nil
	}
	want := src()
	s.pods.pmu.Lock()
	defer s.pods.pmu.Unlock()
	for k := range s.pods.applied {
		if _, ok := want[k]; !ok {
			delete(s.pods.applied, k) // gone: its namespace went with it
		}
	}
	var errs []error
	for _, k := range slices.Sorted(func(yield func(string) bool) {
		for k := range want {
			if !yield(k) {
				return
			}
		}
	}) {
		t := want[k]
		fp := podFingerprint(t.Policy)
		if old, ok := s.pods.applied[k]; ok && old == fp && !all {
			continue
		}
		if err := s.writePod(k, t); err != nil {
			delete(s.pods.applied, k)
			errs = append(errs, err)
			continue
		}
		s.pods.applied[k] = fp
		if log != nil && t.Policy != nil && t.Policy.Isolated() {
			log.Debug("multi-network policy: table written", "pod", k, "interfaces", len(t.Policy.Ifaces))
		}
	}
	if len(errs) > 0 {
		s.qmu.Lock()
		s.q.pods = true // the failed ones, at the next sync
		s.qmu.Unlock()
	}
	return errors.Join(errs...)
}

// writePod makes pod k's table t in its namespace (pmu held).
func (s *Syncer) writePod(k string, t PodTable) error {
	err := func() error {
		if t.Err != nil {
			return t.Err
		}
		h, err := s.pods.open(t.Netns)
		if err != nil {
			return err
		}
		defer h.Close()
		p := t.Policy
		if p == nil {
			p = &nft.PodPolicy{}
		}
		return h.ApplyPodPolicy(p)
	}()
	s.mu.Lock()
	if err != nil {
		s.stats.PodFailed++
	} else {
		s.stats.PodTables++
	}
	s.mu.Unlock()
	if err != nil {
		return fmt.Errorf("multi-network policy: pod %s's table: %w", k, err)
	}
	return nil
}

// podFingerprint is p as text, its sets' elements included (a Set's JSON
// has none): two tables with the same text are the same; nil, or nothing
// isolated, is "".
func podFingerprint(p *nft.PodPolicy) string {
	if p == nil || !p.Isolated() {
		return ""
	}
	b, _ := json.Marshal(p)
	var sb strings.Builder
	sb.Write(b)
	for _, i := range p.Ifaces {
		for _, st := range i.Sets {
			fmt.Fprintf(&sb, "|%s %v", st.ID, st.Elems())
		}
	}
	return sb.String()
}
