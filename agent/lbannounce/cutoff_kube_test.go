//go:build kube

package lbannounce

import (
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/cnibox/cnibox/test/kube"
)

// TestKubeLBAnnounceCutOff: the announcer's agent cut off from the API
// server while its process keeps running and its uplink stays up (a
// partition, not a death), twice: once with its connections reset and
// refused, once held open with nothing forwarded (its requests hang). Each
// time another node takes the address over and the client reaches it
// there, and the cut-off node's kernel has dropped the address before or
// when the other took it: never two holders at any observed moment (the
// three kernels and ARP from the LAN every 10 ms). Once the partition
// heals, the cut-off agent sees the new announcer and leaves it be. The
// agents' metrics say so: the new announcer's addresses_announced 1 and
// takeovers_total at least 1, the cut-off one's lease_write_failures_total
// counting its failed renewals (when reset) and, healed, announcing none.
func TestKubeLBAnnounceCutOff(t *testing.T) {
	l := startLab(t, true)
	stop := l.watch(t, addrA)
	defer stop()
	l.service(t, "a", addrA, corev1.ServiceExternalTrafficPolicyCluster)
	holder := l.waitHolder(t, addrA, "", "n1", "n2")
	for _, how := range []kube.Cut{kube.Reset, kube.Silent} {
		old := holder
		t0 := time.Now()
		old.proxy.Set(how)
		dropped, taken := make(chan time.Duration, 1), make(chan time.Duration, 1)
		go func() { // when the cut-off node's kernel lost the address, and another's got it
			var d time.Duration
			for time.Since(t0) < time.Minute {
				hs := l.holders(t, addrA)
				if d == 0 && !slices.Contains(hs, old.name) {
					d = time.Since(t0)
					dropped <- d
				}
				if len(hs) > 0 && !slices.Contains(hs, old.name) {
					taken <- time.Since(t0)
					return
				}
				time.Sleep(10 * time.Millisecond)
			}
			if d == 0 {
				dropped <- -1
			}
			taken <- -1
		}()
		holder = l.waitHolder(t, addrA, old.name, "n1", "n2")
		answered := time.Since(t0)
		d, took := <-dropped, <-taken
		if d < 0 {
			t.Fatalf("cut %d: %s still holds %s a minute after its cut", how, old.name, addrA)
		}
		t.Logf("cut %d (1 reset, 2 silent): %s cut off from the API; its kernel dropped %s %v after, %s's kernel held it %v after and answered %v after", how, old.name, addrA, d, holder.name, took, answered)
		select {
		case <-old.done:
			t.Fatalf("%s's agent ended while cut off: a cut-off is no death", old.name)
		default:
		}
		// The metrics say it: the new announcer holds one address, taken
		// over; the cut-off one's Lease writes failed.
		l.waitMetric(t, holder, "cnibox_agent_lb_addresses_announced", func(v float64) bool { return v == 1 })
		l.waitMetric(t, holder, "cnibox_agent_lb_takeovers_total", func(v float64) bool { return v >= 1 })
		if how == kube.Reset {
			l.waitMetric(t, old, "cnibox_agent_lb_lease_write_failures_total", func(v float64) bool { return v >= 1 })
		}
		old.proxy.Set(kube.Open)
		l.waitRecorded(t, old, addrA, holder.name)
		l.waitMetric(t, old, "cnibox_agent_lb_addresses_announced", func(v float64) bool { return v == 0 })
		if h := l.holders(t, addrA); !slices.Equal(h, []string{holder.name}) {
			t.Fatalf("after %s's partition healed: holders %v, want %s", old.name, h, holder.name)
		}
	}
}
