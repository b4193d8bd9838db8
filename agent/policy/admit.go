//go:build !nokube

package policy

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"sync"

	"github.com/cnibox/cnibox/internal/agentapi"
	"github.com/cnibox/cnibox/internal/policymodel"
)

// A new pod open at once (docs/policy.md): a pod's addresses are in no set
// until its status carries them, one status update after its ADD, so a
// pod of a guarded namespace would be pending (closed) that long even
// where its policies let it talk. The bridge and ptp ADDs of such a pod
// ask the agent, through the pod API, to place it with the addresses the
// ADD gave it: the watcher sets them on the pod (its labels are the
// informer's) and answers once the table has them, so the ADD returns
// with the pod placed. The admitted addresses are the pod's until its
// status carries addresses (then the status's), its DEL releases them,
// another pod admitted with one of them takes it, and the pod's deletion
// drops them: an address is never placed for a pod that no longer has it
// longer than the ADD or DEL that moved it.

// Admitter answers the pod API's policy operations once a watcher runs
// (WatchConfig.Admitter): made before both, so that the pod API, which
// starts first, can hand the calls on.
type Admitter struct {
	mu sync.Mutex
	w  *watcher
}

// NewAdmitter returns an Admitter with no watcher yet.
func NewAdmitter() *Admitter { return &Admitter{} }

func (a *Admitter) set(w *watcher) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.w = w
}

// attachedReader is the Syncer's part an admission needs: whether the
// node's table has addresses in its attached set (a CNI ADD put them
// there), and a wait for the commit of what was handed over so far.
type attachedReader interface {
	Attached(ips []netip.Addr) (bool, error)
	Wait(ctx context.Context) error
}

// Serve answers one OpPolicyAdmit or OpPolicyRelease request.
func (a *Admitter) Serve(ctx context.Context, req agentapi.Request) *agentapi.Response {
	resp := &agentapi.Response{}
	a.mu.Lock()
	w := a.w
	a.mu.Unlock()
	var err error
	switch {
	case req.Policy == nil || len(req.Policy.IPs) == 0:
		err = &agentapi.Error{Reason: agentapi.ReasonBadRequest, Msg: req.Op + ": policy.ips is required"}
	case w == nil:
		err = &agentapi.Error{Reason: agentapi.ReasonUnavailable, Msg: req.Op + ": the NetworkPolicy watcher has not synced yet"}
	case req.Op == agentapi.OpPolicyAdmit:
		err = w.admit(ctx, req.Namespace, req.Name, req.Policy.IPs)
	case req.Op == agentapi.OpPolicyRelease:
		err = w.release(ctx, req.Policy.IPs)
	default:
		err = &agentapi.Error{Reason: agentapi.ReasonBadRequest, Msg: fmt.Sprintf("unknown op %q: want %s or %s", req.Op, agentapi.OpPolicyAdmit, agentapi.OpPolicyRelease)}
	}
	if err != nil {
		resp.Fail(err)
	}
	return resp
}

// admit places pod ns/name of this node with ips, which must be in the
// table's attached set, and returns once the table has the change.
func (w *watcher) admit(ctx context.Context, ns, name string, ips []netip.Addr) error {
	syncer, ok := w.cfg.Syncer.(attachedReader)
	if !ok {
		return &agentapi.Error{Reason: agentapi.ReasonNotServed, Msg: "policy-admit: this agent's syncer cannot tell attached addresses"}
	}
	for i, a := range ips {
		ips[i] = a.Unmap()
	}
	// Only addresses a CNI ADD attached: the socket's callers are root,
	// but an address placed for the wrong pod would give it that pod's
	// rights.
	if ok, err := syncer.Attached(ips); err != nil {
		return fmt.Errorf("policy-admit: read the attached set: %w", err)
	} else if !ok {
		return &agentapi.Error{Reason: agentapi.ReasonBadRequest, Msg: fmt.Sprintf("policy-admit: %v not all in the policy table's attached set: only a pod's CNI ADD admits its addresses", ips)}
	}
	key := ns + "/" + name
	for {
		w.mu.Lock()
		p := w.e.nsPods[ns][name]
		ev := w.podEvent()
		if p != nil {
			if p.Node != w.e.node {
				w.mu.Unlock()
				return &agentapi.Error{Reason: agentapi.ReasonBadRequest, Msg: fmt.Sprintf("policy-admit: pod %s is not this node's (%s)", key, p.Node)}
			}
			if other := w.holderLocked(key, ips); other != "" {
				w.mu.Unlock()
				return &agentapi.Error{Reason: agentapi.ReasonBadRequest, Msg: fmt.Sprintf("policy-admit: %v: pod %s's status holds it", ips, other)}
			}
			w.admitLocked(key, p, ips)
			w.mu.Unlock()
			break
		}
		w.mu.Unlock()
		select { // the informer has not seen the pod yet
		case <-ev:
		case <-ctx.Done():
			return fmt.Errorf("policy-admit: pod %s not in the watcher's informer: %w", key, ctx.Err())
		}
	}
	return syncer.Wait(ctx)
}

// podEvent is a channel closed at the next pod event (w.mu held).
func (w *watcher) podEvent() chan struct{} {
	if w.podEv == nil {
		w.podEv = make(chan struct{})
	}
	return w.podEv
}

// podEventLocked wakes the admissions waiting for a pod (w.mu held).
func (w *watcher) podEventLocked() {
	if w.podEv != nil {
		close(w.podEv)
		w.podEv = nil
	}
}

// admitLocked sets ips on pod p (key) unless its status has addresses,
// taking them from any other admission first (w.mu held).
func (w *watcher) admitLocked(key string, p *Pod, ips []netip.Addr) {
	w.dropAdmitted(ips, key)
	if len(p.IPs) > 0 {
		return // the status says: it wins
	}
	if w.admitted == nil {
		w.admitted = map[string][]netip.Addr{}
	}
	w.admitted[key] = slices.Clone(ips)
	np := *p
	np.IPs = slices.Clone(ips)
	w.changeLocked(func(e *Engine) policymodel.Delta { return e.SetPod(&np) }, true)
}

// release takes ips out of every admission and returns once the table has
// the change.
func (w *watcher) release(ctx context.Context, ips []netip.Addr) error {
	for i, a := range ips {
		ips[i] = a.Unmap()
	}
	w.mu.Lock()
	w.dropAdmitted(ips, "")
	w.mu.Unlock()
	if syncer, ok := w.cfg.Syncer.(attachedReader); ok {
		return syncer.Wait(ctx)
	}
	return nil
}

// dropAdmitted takes ips out of the admissions of every pod but except's
// (w.mu held), changing those pods in the engine.
func (w *watcher) dropAdmitted(ips []netip.Addr, except string) {
	for key, held := range w.admitted {
		if key == except {
			continue
		}
		left := slices.DeleteFunc(slices.Clone(held), func(a netip.Addr) bool { return slices.Contains(ips, a) })
		if len(left) == len(held) {
			continue
		}
		if len(left) == 0 {
			delete(w.admitted, key)
		} else {
			w.admitted[key] = left
		}
		ns, name := splitKey(key)
		if p := w.e.nsPods[ns][name]; p != nil && len(p.IPs) > 0 {
			np := *p
			np.IPs = left
			w.changeLocked(func(e *Engine) policymodel.Delta { return e.SetPod(&np) }, p.Node == w.e.node)
		}
	}
}

// podFromInformer is the pod the informer gave, with its admitted
// addresses while its status has none (w.mu held); a status with
// addresses ends the admission.
func (w *watcher) podFromInformer(p *Pod) *Pod {
	key := p.Key()
	held, ok := w.admitted[key]
	switch {
	case !ok:
		return p
	case len(p.IPs) > 0 || p.Done:
		delete(w.admitted, key)
		return p
	}
	np := *p
	np.IPs = slices.Clone(held)
	return &np
}

// applyLocked hands d, the change just made, to the syncer (w.mu held);
// always: also when empty (a pod of the node: its addresses leave the
// pending set). A Handoff is handed the model after an empty change too
// (Offer): it took it back before.
func (w *watcher) applyLocked(d policymodel.Delta, always bool) {
	if !w.started.Load() {
		return
	}
	if d.Empty() && !always {
		if h, ok := w.cfg.Syncer.(Handoff); ok {
			h.Offer(w.e.current())
		}
		return
	}
	w.logIssues(d)
	if err := w.cfg.Syncer.Apply(w.e.current(), d); err != nil {
		w.cfg.Log.Error("network policy: apply", "err", err)
	}
}

func splitKey(key string) (ns, name string) {
	for i := range len(key) {
		if key[i] == '/' {
			return key[:i], key[i+1:]
		}
	}
	return "", key
}

// holderLocked is another pod of the node whose status holds one of ips
// (not done), or "" (w.mu held): an address is placed for one pod at a
// time, and a caller of the socket must not lend one pod's address to
// another pod's labels.
func (w *watcher) holderLocked(key string, ips []netip.Addr) string {
	for k, p := range w.e.localPods {
		if k == key || p.Done {
			continue
		}
		if held, ok := w.admitted[k]; ok && slices.Equal(held, p.IPs) {
			continue // its addresses are an admission, which this one takes over
		}
		for _, a := range p.IPs {
			if slices.Contains(ips, a) {
				return k
			}
		}
	}
	return ""
}
