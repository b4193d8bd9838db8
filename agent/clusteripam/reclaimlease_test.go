//go:build !nokube

package clusteripam

import (
	"context"
	"strconv"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cnibox/cnibox/internal/kubecore"
	"github.com/cnibox/cnibox/internal/kubecore/kubecoretest"
)

// Two agents whose clocks differ by an hour: A holds the reclaim Lease and
// writes renewTime by its clock, B watches the record by its own. Whichever
// way the skew goes, B does not take the Lease while A renews it, and takes
// it one lease duration (of B's time) after A's last renewal. Judged by
// renewTime against B's clock, as before, A's Lease looked expired at once
// to B when A's clock was behind (two scanners), and never expired when
// A's clock was ahead (a dead holder kept it for an hour).
func TestLeaseExpiryByLocalObservation(t *testing.T) {
	for _, skew := range []time.Duration{-time.Hour, time.Hour} {
		t.Run("A's clock "+skew.String(), func(t *testing.T) {
			b := time.Date(2026, 11, 25, 1, 0, 0, 0, time.UTC) // B's clock
			holder, dur := "node-a", int32(6)
			rv := 100
			var l lease
			var renewed time.Time // B's time of A's last renewal
			renew := func() {     // A renews: a new record, renewTime by A's clock
				rv++
				at := metav1.NewMicroTime(b.Add(skew))
				l.ResourceVersion = strconv.Itoa(rv)
				l.Spec = leaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &dur, RenewTime: &at}
				renewed = b
			}
			var seen observed
			// A renews every 2 s for a minute: B never sees it expired.
			for i := 0; i < 30; i++ {
				renew()
				for step := 0; step < 2; step++ {
					if seen.expired(&l, b) {
						t.Fatalf("B took the Lease at %v while A renewed it every 2 s", b)
					}
					b = b.Add(time.Second)
				}
			}
			// A dies: the record stops changing.
			for !seen.expired(&l, b) {
				b = b.Add(time.Second)
				if b.Sub(renewed) > time.Minute {
					t.Fatalf("B had not taken the Lease a minute after A's last renewal (lease duration %d s)", dur)
				}
			}
			if got := b.Sub(renewed); got < 6*time.Second || got > 8*time.Second {
				t.Errorf("B took the Lease %v after A's last renewal, want one lease duration (6 s) plus up to 2 s", got)
			}
		})
	}
}

// A fresh agent that first reads a Lease nobody renews waits one duration
// before taking it; a released Lease (no holder) is free at once.
func TestLeaseExpiryFirstSight(t *testing.T) {
	now := time.Date(2026, 11, 25, 1, 0, 0, 0, time.UTC)
	holder, dur := "node-a", int32(6)
	l := lease{Spec: leaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &dur}}
	l.ResourceVersion = "7"
	var seen observed
	if seen.expired(&l, now) || seen.expired(&l, now.Add(6*time.Second)) {
		t.Error("a Lease first seen now expired within its duration")
	}
	if !seen.expired(&l, now.Add(7*time.Second)) {
		t.Error("a Lease unchanged for 7 s of a 6 s duration has not expired")
	}
	empty := ""
	l.Spec.HolderIdentity = &empty
	if !(&observed{}).expired(&l, now) {
		t.Error("a released Lease (holderIdentity \"\") is not free")
	}
}

// TestReclaimLeaseGivesUp: taking or renewing the reclaim Lease against
// an API server that never answers returns (not holding, with an error)
// rather than hanging, so the reclaim's next round is tried.
func TestReclaimLeaseGivesUp(t *testing.T) {
	c, err := kubecore.Client(kubecoretest.Silent(t))
	if err != nil {
		t.Fatal(err)
	}
	r := &Reclaimer{Kube: &Kube{namespace: "kube-system"}, Identity: "a", Interval: 200 * time.Millisecond, Now: time.Now, core: c}
	kubecoretest.GivesUp(t, "taking the reclaim Lease (it lasts 1 s)", time.Minute, func() error {
		held, err := r.lease(context.Background())
		if held {
			return nil // holding with no answer: reported as no error
		}
		return err
	})
}
