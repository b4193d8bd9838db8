package main

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/cnibox/cnibox/test/internal/benchnode"
	"github.com/cnibox/cnibox/test/internal/policyload"
)

// run measures what main.go says, in its order; the result holds what
// was measured when an error stops it.
func (c *cluster) run() (*result, error) {
	r := &result{n: c.o.n}
	w := newWatcher()
	ctx, cancel := context.WithCancel(c.ctx)
	defer cancel()
	if err := w.run(ctx, c.cs); err != nil {
		return r, err
	}
	defer func() { r.doubled = w.doubled() }()
	if err := c.backlog(r, w); err != nil {
		return r, err
	}
	if err := c.burst(r, w); err != nil {
		return r, err
	}
	if err := c.oneByOne(r, w); err != nil {
		return r, err
	}
	return r, c.failovers(r, w)
}

// backlog creates -n Services with no agent running, then starts one and
// times it from its start to the last of them holding an address: the
// allocator's own pace (an election without a holder, one list, one plan,
// -n status writes), the API's creates left out.
func (c *cluster) backlog(r *result, w *watcher) error {
	c.o.logf("creating %d Services with no allocator, %d at a time", c.o.n, c.o.workers)
	if err := policyload.Parallel(c.o.workers, c.o.n, func(i int) error { return c.createService(backlogName(i)) }); err != nil {
		return err
	}
	t0 := time.Now()
	if err := c.startAgent(1); err != nil {
		return err
	}
	var last time.Time
	for i := range c.o.n {
		at, err := w.wait(backlogName(i), c.o.timeout)
		if err != nil {
			return err
		}
		last = maxTime(last, at)
	}
	r.backlog = last.Sub(t0)
	c.o.logf("the agent started: all %d allocated %.1f s later", c.o.n, r.backlog.Seconds())
	_, err := c.waitLeader()
	return err
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// burst creates -n Services at once and times their allocation.
func (c *cluster) burst(r *result, w *watcher) error {
	c.o.logf("creating %d Services, %d at a time", c.o.n, c.o.workers)
	pid := c.agent(nodeName(1)).Pid()
	cpu0 := benchnode.StatCPU(pid)
	w0, _ := writes(1)
	created := make([]time.Time, c.o.n)
	var mu sync.Mutex
	t0 := time.Now()
	err := policyload.Parallel(c.o.workers, c.o.n, func(i int) error {
		at := time.Now()
		mu.Lock()
		created[i] = at
		mu.Unlock()
		return c.createService(burstName(i))
	})
	if err != nil {
		return err
	}
	r.createAll = time.Since(t0)
	c.o.logf("created in %.1f s; waiting for their addresses", r.createAll.Seconds())
	var last time.Time
	for i := range c.o.n {
		at, err := w.wait(burstName(i), c.o.timeout)
		if err != nil {
			return err
		}
		r.burst = append(r.burst, at.Sub(created[i]))
		if at.After(last) {
			last = at
		}
	}
	r.allocateAll = last.Sub(t0)
	r.leaderCPU = benchnode.StatCPU(pid) - cpu0
	if w1, err := writes(1); err == nil {
		r.writes = map[string]float64{}
		for k, v := range w1 {
			r.writes[k] = v - w0[k]
		}
	}
	c.o.logf("all %d allocated %.1f s after the first create", c.o.n, r.allocateAll.Seconds())
	return nil
}

// oneByOne creates -samples Services one at a time, each once the last
// has its address.
func (c *cluster) oneByOne(r *result, w *watcher) error {
	c.o.logf("%d Services one at a time", c.o.samples)
	for k := range c.o.samples {
		name := "x-" + strconv.Itoa(k)
		t0 := time.Now()
		if err := c.createService(name); err != nil {
			return err
		}
		at, err := w.wait(name, c.o.timeout)
		if err != nil {
			return err
		}
		r.single = append(r.single, at.Sub(t0))
	}
	return nil
}

// failovers SIGKILLs the leading agent -kills times, creating a Service
// right after each kill, the killed agent restarted once it is timed.
func (c *cluster) failovers(r *result, w *watcher) error {
	if c.o.kills == 0 {
		return nil
	}
	if err := c.startAgent(2); err != nil {
		return err
	}
	for k := range c.o.kills {
		leader, err := c.waitLeader()
		if err != nil {
			return err
		}
		i := 1
		if leader == nodeName(1) {
			i = 2
		}
		if c.agent(nodeName(i)) == nil {
			if err := c.startAgent(i); err != nil {
				return err
			}
		}
		name := "f-" + strconv.Itoa(k)
		t0 := time.Now()
		if err := c.kill(leader); err != nil {
			return err
		}
		if err := c.createService(name); err != nil {
			return err
		}
		at, err := w.wait(name, c.o.timeout)
		if err != nil {
			return err
		}
		r.failover = append(r.failover, at.Sub(t0))
		c.o.logf("failover %d: %s killed, %s's address %.2f s later", k+1, leader, name, at.Sub(t0).Seconds())
		dead := 1
		if leader == nodeName(2) {
			dead = 2
		}
		if err := c.startAgent(dead); err != nil {
			return err
		}
	}
	return nil
}

func burstName(i int) string   { return "s-" + strconv.Itoa(i) }
func backlogName(i int) string { return "b-" + strconv.Itoa(i) }
