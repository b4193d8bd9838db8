package main

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/cnibox/cnibox/test/internal/benchnode"
)

// runSide runs proxy p at the cluster's current number of Services on a
// fresh node namespace: the first sync, the memory after it, then -samples
// changes one at a time. It removes the samples from the API afterwards.
func (c *cluster) runSide(p proxy) *result {
	o := c.o
	n := c.services
	r := &result{Side: p.name(), Anchor: p.anchor(), Services: n}
	defer func() { r.Load = loadavg() }()
	if why := p.unavailable(); why != "" {
		r.Unavailable = why
		o.logf("%s at %d Services: unavailable: %s", p.name(), n, why)
		return r
	}
	nd, err := c.newNode(p.tag(), n)
	defer func() {
		if nd != nil && nd.watch != nil {
			r.Overflows = nd.watch.overflowed()
		}
		nd.close()
		if err := c.cleanSamples(); err != nil {
			o.logf("remove the samples: %v", err)
		}
	}()
	if err == nil {
		nd.watch, err = watchMap(nd.Path, p.target(), benchPrefix)
	}
	if err != nil {
		r.Err = fmt.Sprintf("node namespace: %v", err)
		return r
	}
	t0 := time.Now()
	if err := p.start(c, nd); err != nil {
		r.Err = fmt.Sprintf("start: %v", err)
		return r
	}
	done, err := nd.watch.waitCount(n, o.timeout, nd.alive)
	if err != nil {
		r.Err = fmt.Sprintf("first sync: %v", err)
		return r
	}
	r.SyncS = done.Sub(t0).Seconds()
	pid := nd.proc.Pid()
	m := benchnode.ReadMem(pid)
	r.RSSMiB, r.PSSMiB = float64(m.RSS)/1024, float64(benchnode.PSS(pid))/1024
	o.logf("%s at %d Services: first sync %s, RSS %.1f MiB (PSS %.1f); %d notification overflows", p.name(), n, secs(r.SyncS), r.RSSMiB, r.PSSMiB, nd.watch.overflowed())

	var lat, api []float64
	start := time.Now()
	for k := range o.samples {
		if k >= o.minSample && time.Since(start) > o.sampleFor {
			o.logf("%s at %d Services: %d changes timed in %s (-samples-time)", p.name(), n, k, time.Since(start).Round(time.Second))
			break
		}
		ms, apiMS, err := c.oneChange(nd)
		if err != nil {
			r.Err = fmt.Sprintf("one change: %v", err)
			break
		}
		lat, api = append(lat, ms), append(api, apiMS)
	}
	r.Samples = len(lat)
	r.ChangeP50, r.ChangeP99, r.ChangeMax = percentiles(lat)
	r.APIP50, r.APIP99, _ = percentiles(api)
	if r.Samples > 0 {
		o.logf("%s at %d Services: one change p50 %s p99 %s max %s (%d); of each, the API's answer to the create: p50 %s p99 %s",
			p.name(), n, msecs(r.ChangeP50), msecs(r.ChangeP99), msecs(r.ChangeMax), r.Samples, msecs(r.APIP50), msecs(r.APIP99))
	}
	if r.Err != "" {
		o.logf("%s at %d Services: %s", p.name(), n, r.Err)
	}
	return r
}

// oneChange times one new Service in ms: from its create to its
// ClusterIP's element in the map; apiMS is the create call's own time. Each change starts once the proxy has
// committed nothing for -gap (kube-proxy's --min-sync-period holds a sync
// back until a second after the last one started). Its EndpointSlice is
// created first and, unless -pair, the proxy left -gap again to take it
// in (a proxy may commit nothing for a slice of no Service, so the wait
// is from the slice's create or the last commit, whichever is later):
// one API event is timed. With -pair the slice and the Service are
// created back to back and timed from the slice's create: kube-proxy then
// syncs the slice at once and the Service a second later.
func (c *cluster) oneChange(nd *node) (ms, apiMS float64, err error) {
	o := c.o
	k, ip, err := c.nextSample()
	if err != nil {
		return 0, 0, err
	}
	if err := nd.watch.quiet(o.gap, time.Time{}, o.timeout); err != nil {
		return 0, 0, err
	}
	t1 := time.Now()
	if err := c.createSampleSlice(k); err != nil {
		return 0, 0, err
	}
	if !o.pair {
		if err := nd.watch.quiet(o.gap, time.Now(), o.timeout); err != nil {
			return 0, 0, err
		}
		t1 = time.Now()
	}
	t2 := time.Now()
	if err := c.createSampleService(k); err != nil {
		return 0, 0, err
	}
	apiMS = time.Since(t2).Seconds() * 1000
	at, err := nd.watch.waitAddr(ip, o.timeout, nd.alive)
	if err != nil {
		return 0, 0, err
	}
	return at.Sub(t1).Seconds() * 1000, apiMS, nil
}

// loadavg is /proc/loadavg's three averages (the machine is shared: a
// row taken under load says so).
func loadavg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}
