package nft

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/cnibox/cnibox/internal/svcmodel"
	"github.com/cnibox/cnibox/netops/nstest"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// BenchmarkServicesFirstSync: one first sync of 10,000 Services x 4
// endpoints, on the kernel (root), in a fresh namespace (fresh: no table
// before it, nothing deleted before it: the agent's start) or in one
// whose tables of the same Services were deleted just before, outside
// the timer (after-delete: BenchmarkServicesApply's first-sync, where the
// kernel's release of the old tables may still run), split into where
// its wall time went, so that a loaded machine does not hide a wait: the
// sync runs on one locked OS thread, whose schedstat gives its time on
// a CPU and its time runnable but waiting for one (run delay); the rest
// of the wall time the thread was blocked (in the kernel's commit: RCU
// grace periods, a worker's flush, a mutex; or the Go runtime's futex
// waits: the collector). Per op: blocked-ms, thread-cpu-ms (of which
// thread-sys-ms in the kernel), rundelay-ms, nvcsw and nivcsw (the
// thread's voluntary and involuntary context switches) and proc-cpu-ms (the process's user + system: the collector
// and the rest of the runtime too).
//
//	go test -run '^$' -bench ServicesFirstSync -benchtime 5x ./netops/nft
func BenchmarkServicesFirstSync(b *testing.B) {
	snap := sortedSnap(manySnap(10000, 4))
	b.Run("fresh", func(b *testing.B) { firstSyncSplit(b, snap, false, false) })
	b.Run("after-delete", func(b *testing.B) { firstSyncSplit(b, snap, true, false) })
	// with a reader of nftables' notifications in the namespace (what
	// `nft monitor` joins, and make bench-services' watch): the kernel
	// then builds a message for every object of the commit
	b.Run("listener", func(b *testing.B) { firstSyncSplit(b, snap, false, true) })
}

// firstSyncSplit times b.N first syncs of snap, each in a namespace of
// its own, the tables written and deleted there first when again.
func firstSyncSplit(b *testing.B, snap *svcmodel.Snapshot, again, listen bool) {
	var blocked, cpu, delay, wall time.Duration
	var nvcsw, nivcsw, pcpu int64
	var sys time.Duration
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	for b.Loop() {
		b.StopTimer()
		ns := nstest.NewNS(b, "svcf")
		h, err := Open(ns)
		if err != nil {
			b.Fatal(err)
		}
		if listen {
			drainNotifications(b, ns)
		}
		s := NewServices(h, ServicesOptions{})
		if again {
			if err := s.Apply(snap); err != nil {
				b.Fatal(err)
			}
			if err := s.Delete(); err != nil {
				b.Fatal(err)
			}
		}
		runtime.GC()
		b.StartTimer()
		c0, d0, r0, p0 := threadSched(b), time.Now(), threadUsage(b), processCPU()
		if err := s.Apply(snap); err != nil {
			b.Fatal(err)
		}
		w := time.Since(d0)
		c1, r1, p1 := threadSched(b), threadUsage(b), processCPU()
		b.StopTimer()
		h.Close()
		wall += w
		cpu += c1.cpu - c0.cpu
		delay += c1.delay - c0.delay
		blocked += w - (c1.cpu - c0.cpu) - (c1.delay - c0.delay)
		nvcsw += r1.Nvcsw - r0.Nvcsw
		nivcsw += r1.Nivcsw - r0.Nivcsw
		sys += time.Duration(r1.Stime.Nano() - r0.Stime.Nano())
		pcpu += p1 - p0
		b.StartTimer()
	}
	n := float64(b.N)
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 / n }
	b.ReportMetric(ms(wall), "wall-ms")
	b.ReportMetric(ms(blocked), "blocked-ms")
	b.ReportMetric(ms(cpu), "thread-cpu-ms")
	b.ReportMetric(ms(sys), "thread-sys-ms")
	b.ReportMetric(ms(delay), "rundelay-ms")
	b.ReportMetric(float64(nvcsw)/n, "nvcsw")
	b.ReportMetric(float64(nivcsw)/n, "nivcsw")
	b.ReportMetric(float64(pcpu)/1e6/n, "proc-cpu-ms")
}

// schedstat is a thread's /proc/thread-self/schedstat: its time on a
// CPU and its time runnable on a run queue.
type schedstat struct{ cpu, delay time.Duration }

func threadSched(b *testing.B) schedstat {
	raw, err := os.ReadFile("/proc/thread-self/schedstat")
	if err != nil {
		b.Fatal(err)
	}
	var s schedstat
	var slices int64
	if _, err := fmt.Sscan(string(raw), &s.cpu, &s.delay, &slices); err != nil {
		b.Fatalf("/proc/thread-self/schedstat %q: %v", raw, err)
	}
	return s
}

// threadUsage is the calling thread's rusage: its time in the kernel,
// its context switches.
func threadUsage(b *testing.B) syscall.Rusage {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_THREAD, &ru); err != nil {
		b.Fatal(err)
	}
	return ru
}

// drainNotifications joins nftables' notification group in the namespace
// at ns and reads it until the benchmark ends.
func drainNotifications(b *testing.B, ns string) {
	f, err := os.Open(ns)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	c, err := netlink.Dial(unix.NETLINK_NETFILTER, &netlink.Config{NetNS: int(f.Fd()), Groups: 1 << (unix.NFNLGRP_NFTABLES - 1)})
	if err != nil {
		b.Fatal(err)
	}
	_ = c.SetReadBuffer(64 << 20)
	b.Cleanup(func() { c.Close() })
	go func() {
		for {
			if _, err := c.Receive(); err != nil && !errors.Is(err, unix.ENOBUFS) {
				return // closed
			}
		}
	}()
}
