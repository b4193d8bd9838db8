package nstest

import (
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/mdlayher/arp"
)

// ARPProber asks a LAN, from an interface of a namespace, who answers for
// an address: the LAN's view of who holds it.
type ARPProber struct {
	c *arp.Client
}

// NewARPProber opens an ARP client on ifname in the namespace at nsPath,
// closed when the test ends.
func NewARPProber(t testing.TB, nsPath, ifname string) *ARPProber {
	t.Helper()
	var c *arp.Client
	if err := Run(t, nsPath, func() error {
		ifi, err := net.InterfaceByName(ifname)
		if err != nil {
			return err
		}
		c, err = arp.Dial(ifi)
		return err
	}); err != nil {
		t.Fatalf("ARP client on %s in %s: %v", ifname, nsPath, err)
	}
	t.Cleanup(func() { c.Close() })
	return &ARPProber{c: c}
}

// Answers broadcasts one request for target and returns the MACs of the
// replies that come within window (more than one: two hosts claim it).
func (p *ARPProber) Answers(target netip.Addr, window time.Duration) ([]string, error) {
	if err := p.c.Request(target); err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	var out []string
	if err := p.c.SetReadDeadline(time.Now().Add(window)); err != nil {
		return nil, err
	}
	for {
		r, _, err := p.c.Read()
		if err != nil {
			return out, nil // the window is over
		}
		if r.Operation == arp.OperationReply && r.SenderIP == target && !seen[r.SenderHardwareAddr.String()] {
			seen[r.SenderHardwareAddr.String()] = true
			out = append(out, r.SenderHardwareAddr.String())
		}
	}
}

// WatchOneHolder checks until stop is called that addr has one holder at
// most at every instant: holders (the hosts whose kernels have it, read
// every `every`) never names two, and p (the LAN's view, ARPProber or
// NDPProber, asked in rounds of 20 ms) never hears two MACs answer one
// request. Each breach fails the test.
func WatchOneHolder(t testing.TB, p Prober, addr netip.Addr, every time.Duration, holders func() []string) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	// every pause until stop, a round; a round that returns false ends it
	rounds := func(pause time.Duration, round func() bool) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-done:
					return
				case <-time.After(pause):
				}
				if !round() {
					return
				}
			}
		}()
	}
	rounds(every, func() bool {
		if hs := holders(); len(hs) > 1 {
			t.Errorf("%v hold %s at once", hs, addr)
		}
		return true
	})
	rounds(0, func() bool {
		macs, err := p.Answers(addr, 20*time.Millisecond)
		if err != nil {
			t.Errorf("ARP or NDP request for %s: %v", addr, err)
			return false
		}
		if len(macs) > 1 {
			t.Errorf("two MACs answer ARP or NDP for %s at once: %v", addr, macs)
		}
		return true
	})
	return func() { close(done); wg.Wait() }
}
