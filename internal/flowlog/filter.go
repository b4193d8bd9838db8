package flowlog

import (
	"fmt"
	"strings"
	"time"
)

// Filter selects records; a zero field selects all. A suppressed record
// matches whatever the filter but Since: what it counts may hold what the
// filter looks for.
type Filter struct {
	// Namespace: the source's or the destination's namespace is this.
	Namespace string
	// Pod: the source or the destination is this pod, as NS/NAME, or NAME
	// in any namespace.
	Pod string
	// Verdict: the record's verdict is this.
	Verdict Verdict
	// Policy: the deciding policy, or one of the policies that isolate the
	// pod, has this name, as NAME or NS/NAME (a ClusterNetworkPolicy has no
	// namespace).
	Policy string
	// Since: the record's time is Since or later.
	Since time.Time
}

// Check says what is wrong with f's words, if anything.
func (f Filter) Check() error {
	if f.Verdict != "" && !f.Verdict.Known() {
		return fmt.Errorf("verdict %q: want allow, deny, staged-allow, staged-deny or suppressed", f.Verdict)
	}
	for _, w := range []struct{ name, v string }{{"pod", f.Pod}, {"policy", f.Policy}} {
		if ns, name, ok := strings.Cut(w.v, "/"); ok && (ns == "" || name == "" || strings.Contains(name, "/")) {
			return fmt.Errorf("%s %q: want NAME or NAMESPACE/NAME", w.name, w.v)
		}
	}
	return nil
}

// Match reports whether f selects r.
func (f Filter) Match(r *Record) bool {
	if !f.Since.IsZero() && r.Time.Before(f.Since) {
		return false
	}
	if r.Verdict == Suppressed {
		return true
	}
	if f.Verdict != "" && r.Verdict != f.Verdict {
		return false
	}
	if f.Namespace != "" && r.Src.Namespace != f.Namespace && r.Dst.Namespace != f.Namespace {
		return false
	}
	if f.Pod != "" && !isPod(r.Src, f.Pod) && !isPod(r.Dst, f.Pod) {
		return false
	}
	return f.Policy == "" || isPolicy(r.Policy, f.Policy)
}

// isPod reports whether e is the pod named NS/NAME or NAME.
func isPod(e Endpoint, pod string) bool {
	if ns, name, ok := strings.Cut(pod, "/"); ok {
		return e.Namespace == ns && e.Pod == name
	}
	return e.Pod != "" && e.Pod == pod
}

// isPolicy reports whether p, or a policy that isolates the pod, is named
// NS/NAME or NAME.
func isPolicy(p *Policy, policy string) bool {
	if p == nil {
		return false
	}
	ns, name, ok := strings.Cut(policy, "/")
	if !ok {
		ns, name = "", policy
	}
	if ok && p.Namespace != ns {
		return false
	}
	if p.Name == name {
		return true
	}
	for _, n := range p.Isolating {
		if n == name {
			return true
		}
	}
	return false
}
