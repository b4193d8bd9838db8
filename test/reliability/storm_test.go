package reliability

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"strconv"
	"sync"
	"testing"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/cnibox/cnibox/store"
)

const stormConf = `{"cniVersion":"1.1.0","name":"storm","type":"bridge","bridge":"cbxstorm0","isGateway":true,"ipMasq":true,
	"ipam":{"type":"host-local","ranges":[[{"subnet":"10.93.0.0/24"}]]}}`

// stormCalls is the number of calls of the storm: $CNIBOX_STORM_CALLS
// (make soak raises it), 500 by default.
func stormCalls(t *testing.T) int {
	if v := os.Getenv("CNIBOX_STORM_CALLS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			t.Fatalf("CNIBOX_STORM_CALLS=%q: want a positive number", v)
		}
		return n
	}
	return 500
}

// TestStorm runs a storm of mixed ADD, CHECK and DEL calls on one network,
// each a separate plugin process, 64 at a time, over 96 pods, with a GC
// between every 100 calls (GC keeps the pods that are up, as a runtime's GC
// does). Every call must succeed or fail with the documented try-again code
// (11); no two live pods may ever share an address; after the storm DELs and
// a last GC nothing is left, and the store passes its check.
//
// The second run waits at most 1ms for the store's lock, so that many calls
// give up with 11; a failed ADD is followed by DEL, as runtimes do.
func TestStorm(t *testing.T) {
	t.Run("default store timeout", func(t *testing.T) { storm(t, stormCalls(t), nil) })
	t.Run("1ms store timeout", func(t *testing.T) { storm(t, stormCalls(t)/2, []string{"CNIBOX_STORE_TIMEOUT=1ms"}) })
}

func storm(t *testing.T, calls int, env []string) {
	const (
		workers = 64
		pods    = 96
		gcEvery = 100
	)
	n := newNode(t, plainBin(t))
	nw, conf := tnet{name: "storm", bridge: "cbxstorm0"}, []byte(stormConf)

	type slot struct {
		mu sync.Mutex
		a  *attachment // nil: not added
	}
	slots := make([]*slot, pods)
	all := make([]*attachment, pods)
	for i := range slots {
		all[i] = &attachment{cid: uniq("storm"), ifname: "eth0", netns: newNS(t)}
		slots[i] = &slot{}
	}

	var (
		mu      sync.Mutex
		owner   = map[netip.Addr]int{} // live address -> slot
		counts  = map[string]int{}     // "ADD ok", "DEL 11", ...
		failed  []string
		barrier sync.RWMutex // calls hold it shared, GC exclusively
	)
	count := func(verb string, r result) {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case r.killed:
			failed = append(failed, verb+" killed")
		case r.code == 0:
			counts[verb+" ok"]++
		case r.code == types.ErrTryAgainLater:
			counts[verb+" try again (11)"]++
		default:
			counts[verb+" failed"]++
			failed = append(failed, fmt.Sprintf("%s: %s", verb, r))
		}
	}
	one := func(i int, rng *rand.Rand) {
		barrier.RLock()
		defer barrier.RUnlock()
		s := slots[i]
		s.mu.Lock()
		defer s.mu.Unlock()
		p := all[i]
		switch {
		case s.a == nil && rng.IntN(5) > 0: // mostly ADD, sometimes a DEL of nothing
			r := n.run(call{role: "bridge", verb: "ADD", conf: conf, cid: p.cid, netns: p.netns, ifname: "eth0", env: env})
			count("ADD", r)
			if r.killed {
				return
			}
			if r.code != 0 {
				// The runtime tears the failed sandbox down: DEL until it is
				// not told to try again.
				for i := 0; i < 100; i++ {
					d := n.run(call{role: "bridge", verb: "DEL", conf: conf, cid: p.cid, netns: p.netns, ifname: "eth0", env: env})
					count("DEL after a failed ADD", d)
					if d.code != types.ErrTryAgainLater {
						break
					}
				}
				return
			}
			a := &attachment{cid: p.cid, ifname: "eth0", netns: p.netns, prev: r.out, ips: resultIPs(t, r.out)}
			mu.Lock()
			for _, ip := range a.ips {
				if j, dup := owner[ip]; dup {
					failed = append(failed, fmt.Sprintf("duplicate address: pods %d and %d both hold %s", j, i, ip))
				}
				owner[ip] = i
			}
			mu.Unlock()
			s.a = a
		case s.a != nil && rng.IntN(2) == 0:
			count("CHECK", n.run(call{role: "bridge", verb: "CHECK", conf: withPrev(t, conf, s.a.prev), cid: p.cid, netns: p.netns, ifname: "eth0", env: env}))
		default:
			var prev []byte
			if s.a != nil {
				prev = s.a.prev
			}
			// A DEL told to try again may have done part of its work: the
			// runtime repeats it until it succeeds.
			var r result
			for i := 0; i < 100; i++ {
				r = n.run(call{role: "bridge", verb: "DEL", conf: withPrev(t, conf, prev), cid: p.cid, netns: p.netns, ifname: "eth0", env: env})
				count("DEL", r)
				if r.code != types.ErrTryAgainLater {
					break
				}
			}
			if r.code != 0 || r.killed || s.a == nil {
				return
			}
			mu.Lock()
			for _, ip := range s.a.ips {
				delete(owner, ip)
			}
			mu.Unlock()
			s.a = nil
		}
	}
	gc := func() {
		barrier.Lock()
		defer barrier.Unlock()
		var keep []*attachment
		for _, s := range slots {
			if s.a != nil {
				keep = append(keep, s.a)
			}
		}
		r := n.run(call{role: "bridge", verb: "GC", conf: withKeep(t, conf, keep)})
		count("GC", r)
		n.assertOnly(nw, keep)
	}

	work := make(chan int)
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 8))
			for i := range work {
				one(i, rng)
			}
		}()
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for c := 0; c < calls; c++ {
		if c > 0 && c%gcEvery == 0 {
			gc()
		}
		work <- rng.IntN(pods)
	}
	close(work)
	wg.Wait()
	gc()

	// Tear down what is up (as a runtime would on drain), then a last GC.
	var left []*attachment
	for i, s := range slots {
		if s.a != nil {
			n.del("bridge", conf, s.a, s.a.netns)
			counts["DEL ok"] += 2
			left = append(left, all[i])
		}
	}
	n.gc("bridge", conf)
	counts["GC ok"]++
	n.assertOnly(nw, nil, all...)
	for _, f := range failed {
		t.Error(f)
	}
	total := 0
	for _, c := range counts {
		total += c
	}
	t.Logf("storm %v: %d calls (%d in the storm, 64 at a time over %d pods; then %d pods torn down): %v", env, total, calls, pods, len(left), counts)
}

// TestStoreLockBounded holds the store's lock (as a stuck process would)
// and checks that every verb gives up with code 11 after
// $CNIBOX_STORE_TIMEOUT instead of hanging, leaves nothing behind, and
// works again once the lock is free.
func TestStoreLockBounded(t *testing.T) {
	n := newNode(t, plainBin(t))
	nw, conf := tnet{name: "locked", bridge: "cbxlocked0"}, []byte(`{"cniVersion":"1.1.0","name":"locked","type":"bridge","bridge":"cbxlocked0","ipMasq":true,
		"ipam":{"type":"host-local","ranges":[[{"subnet":"10.94.0.0/24"}]]}}`)
	up := n.add("bridge", conf, uniq("up"), newNS(t))
	st, err := store.Open(n.dataDir)
	if err != nil {
		t.Fatal(err)
	}
	short := []string{"CNIBOX_STORE_TIMEOUT=300ms"}
	p := &attachment{cid: uniq("waiting"), ifname: "eth0", netns: newNS(t)}
	for _, c := range []call{
		{verb: "ADD", conf: conf, cid: p.cid, netns: p.netns},
		{verb: "CHECK", conf: withPrev(t, conf, up.prev), cid: up.cid, netns: up.netns},
		{verb: "DEL", conf: withPrev(t, conf, up.prev), cid: up.cid, netns: up.netns},
		{verb: "GC", conf: withKeep(t, conf, []*attachment{up})},
	} {
		c.role, c.ifname, c.env = "bridge", "eth0", short
		if c.verb == "GC" {
			c.cid, c.netns, c.ifname = "", "", ""
		}
		r := n.run(c)
		if r.code != types.ErrTryAgainLater {
			t.Errorf("%s with the store locked: %s, want error 11", c.verb, r)
		} else {
			t.Logf("%s with the store locked: %s", c.verb, r)
		}
	}
	st.Close()
	n.assertOnly(nw, []*attachment{up}, p)
	n.check("bridge", conf, up)
	a := n.add("bridge", conf, p.cid, p.netns, short...)
	n.del("bridge", conf, a, a.netns)
	n.del("bridge", conf, up, up.netns)
	n.assertOnly(nw, nil, up, a)
}
