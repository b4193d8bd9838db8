package main

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/test/internal/netload"
)

// sample is every run's figure of one pair in one configuration, all
// rounds together.
type sample struct {
	TCP1   []float64 `json:"tcp1_gbps"`
	TCP4   []float64 `json:"tcp4_gbps"`
	RRP50  []float64 `json:"rr_p50_us"`
	RRP99  []float64 `json:"rr_p99_us"`
	RRRate []float64 `json:"rr_per_s"`
	CRR    []float64 `json:"crr_per_s"`
	UDP    []float64 `json:"udp_pps"`
}

func (s *sample) merge(t *sample) {
	s.TCP1 = append(s.TCP1, t.TCP1...)
	s.TCP4 = append(s.TCP4, t.TCP4...)
	s.RRP50 = append(s.RRP50, t.RRP50...)
	s.RRP99 = append(s.RRP99, t.RRP99...)
	s.RRRate = append(s.RRRate, t.RRRate...)
	s.CRR = append(s.CRR, t.CRR...)
	s.UDP = append(s.UDP, t.UDP...)
}

// measure runs every measurement of the pair -runs times, one after the
// other, each run all of them in turn; through a Service, TCP_RR and
// TCP_CRR only.
func (in *instance) measure(p pair) (*sample, error) {
	o := in.e.o
	to := p.loadTo()
	if err := in.reach(p.cli, to.Addr(), to.Port()); err != nil {
		return nil, err
	}
	svc := throughService(p.kind)
	ip := netload.IPerf3{ClientNS: p.cli, ServerNS: p.srv, Server: p.ip, Secs: max(1, int(o.dur.Round(time.Second).Seconds())),
		PinUDP: o.pin, ClientCPU: clientCPU, ServerCPU: serverCPU}
	s := &sample{}
	for run := 1; run <= o.runs; run++ {
		if err := in.e.ctx.Err(); err != nil {
			return s, err
		}
		var g1, g4, pps float64
		var err error
		if !svc {
			if g1, err = ip.TCP(1); err != nil {
				return s, fmt.Errorf("TCP, 1 stream: %w", err)
			}
			if g4, err = ip.TCP(4); err != nil {
				return s, fmt.Errorf("TCP, 4 streams: %w", err)
			}
		}
		var rr netload.RRResult
		var crr netload.CRRResult
		// in the client's namespace, bound to -pin's CPU
		pinned := func(f func() error) error {
			return netops.InNetns(p.cli, func() error {
				if o.pin {
					restore, err := netload.PinThread(serverCPU)
					if err != nil {
						return err
					}
					defer restore()
				}
				return f()
			})
		}
		if err := pinned(func() (err error) { rr, err = netload.RR(to, o.dur); return err }); err != nil {
			return s, fmt.Errorf("TCP_RR: %w", err)
		}
		// (perf started here, not on the pinned thread: it would inherit
		// the CPU its profile measures)
		stop, err := in.perfRecord(p, run)
		if err != nil {
			return s, err
		}
		err = pinned(func() (err error) { crr, err = netload.CRR(to, o.dur); return err })
		if err = errors.Join(err, stop()); err != nil {
			return s, fmt.Errorf("TCP_CRR: %w", err)
		}
		if !svc {
			if pps, err = ip.UDP(o.udpSize); err != nil {
				return s, fmt.Errorf("UDP: %w", err)
			}
			s.TCP1 = append(s.TCP1, g1)
			s.TCP4 = append(s.TCP4, g4)
			s.UDP = append(s.UDP, pps)
		}
		s.RRP50 = append(s.RRP50, us(rr.P50))
		s.RRP99 = append(s.RRP99, us(rr.P99))
		s.RRRate = append(s.RRRate, rr.Rate())
		s.CRR = append(s.CRR, crr.Rate())
		in.logf("%s run %d: TCP %.2f / %.2f Gbit/s, RR p50 %.1f p99 %.1f µs (%.0f/s), CRR %.0f/s, UDP %.0f pps (load %s)",
			p.kind, run, g1, g4, us(rr.P50), us(rr.P99), rr.Rate(), crr.Rate(), pps, loadavg())
	}
	return s, nil
}

func us(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }

// serve is the netload server of a pod: the ports in ports (comma
// separated) until SIGTERM.
func serve(ports string) int {
	if cpu := os.Getenv(serveCPUEnv); cpu != "" {
		n, err := strconv.Atoi(cpu)
		if err == nil {
			err = netload.PinProcess(n)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "bench-datapath: serve: CPU %q: %v\n", cpu, err)
			return 2
		}
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, os.Interrupt)
	for _, p := range strings.Split(ports, ",") {
		port, err := strconv.ParseUint(p, 10, 16)
		if err != nil {
			fmt.Fprintf(os.Stderr, "bench-datapath: serve: port %q: %v\n", p, err)
			return 2
		}
		s, err := netload.Listen(netip.AddrPortFrom(netip.IPv4Unspecified(), uint16(port)))
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench-datapath: serve:", err)
			return 1
		}
		defer s.Close()
	}
	<-sig
	return 0
}

// policyChains counts the NetworkPolicy chains (n-...) of cnibox's policy
// table in the namespace at path.
func policyChains(path string) (int, error) {
	return countChains(path, "cnibox-policy", "n-", "")
}
