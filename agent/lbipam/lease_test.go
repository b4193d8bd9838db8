//go:build !nokube

package lbipam

import (
	"context"
	"testing"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/cnibox/cnibox/internal/kubecore"
	"github.com/cnibox/cnibox/internal/kubecore/kubecoretest"
)

// TestElectionFence: the holder writes only while its last renewal, from
// when it was sent, is younger than the Lease's duration less a period;
// another agent counts a Lease expired only once its record went unchanged
// for the whole duration of its own clock; so the holder has stopped
// writing a period before anyone may take over.
func TestElectionFence(t *testing.T) {
	t0 := time.Unix(1000, 0)
	now := t0
	e := &election{identity: "a", every: 2 * time.Second, duration: 6, now: func() time.Time { return now }}
	if e.fresh() {
		t.Error("fresh before any renewal")
	}
	e.sent = t0
	for d, want := range map[time.Duration]bool{0: true, 3900 * time.Millisecond: true, 4 * time.Second: false, time.Minute: false} {
		now = t0.Add(d)
		if e.fresh() != want {
			t.Errorf("%s after the renewal was sent: fresh %v, want %v", d, !want, want)
		}
	}

	other := &election{identity: "b", every: 2 * time.Second, duration: 6}
	holder, dur := "a", int32(6)
	l := &coordv1.Lease{ObjectMeta: metav1.ObjectMeta{ResourceVersion: "7"}, Spec: coordv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &dur}}
	// b first sees a's renewal long after it was sent: the count starts there.
	seen := t0.Add(3 * time.Second)
	// in this order: expired notes when it first saw the record (a map's
	// order would start the count at a random step)
	for _, c := range []struct {
		d    time.Duration
		want bool
	}{{0, false}, {6 * time.Second, false}, {6001 * time.Millisecond, true}} {
		if got := other.expired(l, seen.Add(c.d)); got != c.want {
			t.Errorf("%s after b first saw a's record: expired %v, want %v", c.d, got, c.want)
		}
	}
	l.ResourceVersion = "8" // a renewed: the count starts again
	if other.expired(l, seen.Add(7*time.Second)) || other.expired(l, seen.Add(12*time.Second)) {
		t.Error("a renewed Lease counted expired before a whole duration passed since the renewal was seen")
	}
	empty := ""
	l.Spec.HolderIdentity = &empty
	if !other.expired(l, seen.Add(12*time.Second)) {
		t.Error("a released Lease is not free at once")
	}
}

// TestLeaseRate: the Lease's client lets a step (a GET and a PUT) through
// every renewal period with room to spare, at the shortest period the
// agent accepts (--lb-ipam-renew 100ms) and at the default; a limit the
// operator's configuration sets is kept.
func TestLeaseRate(t *testing.T) {
	for _, every := range []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 2 * time.Second} {
		c := leaseRate(&rest.Config{}, every)
		if perStep := float64(c.QPS) * every.Seconds(); perStep < 2*2 {
			t.Errorf("renewing every %s: %.1f requests a second (%.1f a period), want room for two steps of 2 requests a period", every, c.QPS, perStep)
		}
		if float64(c.Burst) < float64(c.QPS) {
			t.Errorf("renewing every %s: burst %d below the rate %.1f", every, c.Burst, c.QPS)
		}
	}
	if c := leaseRate(&rest.Config{QPS: 3, Burst: 4}, 200*time.Millisecond); c.QPS != 3 || c.Burst != 4 {
		t.Errorf("the configuration's limit 3/4 became %.1f/%d", c.QPS, c.Burst)
	}
}

// TestStepGivesUp: a step against an API server that never answers
// returns (not holding, with an error) rather than hanging, so the next
// renewal is tried.
func TestStepGivesUp(t *testing.T) {
	c, err := kubecore.GroupClient(kubecoretest.Silent(t), coordv1.SchemeGroupVersion, "/apis", &coordv1.Lease{})
	if err != nil {
		t.Fatal(err)
	}
	e := &election{c: c, namespace: "kube-system", identity: "a", every: 200 * time.Millisecond, duration: 1, now: time.Now}
	kubecoretest.GivesUp(t, "a step of the election (its Lease lasts 1 s)", time.Minute, func() error {
		h, err := e.step(context.Background())
		if h {
			return nil // holding with no answer: reported as no error
		}
		return err
	})
}
