package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"

	"github.com/cnibox/cnibox/agent"
)

// serveHealth serves /healthz, /readyz and /metrics on --health-addr
// (cnibox's), and /healthz and /readyz alone on --healthz-ip:--healthz-port
// (flanneld's, whose address is 0.0.0.0 by default; the port 0 serves
// nothing), one Health behind both. /healthz answers 200 from here
// on, as flanneld's does once its server listens; /readyz once the agent
// holds its lease with the device up. With neither flag it returns a nil
// Health (the agent ignores it).
func serveHealth(ctx context.Context, f *flags, log *slog.Logger) (*agent.Health, func(), error) {
	type listen struct {
		flag, addr string
		metrics    bool
	}
	var ls []listen
	if f.healthAddr != "" {
		ls = append(ls, listen{"--health-addr", f.healthAddr, true})
	}
	if a := f.healthzAddr(); a != "" && a != f.healthAddr {
		ls = append(ls, listen{"--healthz-ip/--healthz-port", a, false})
	}
	// kube-proxy's own ports, where the proxy replaces it
	// (docs/services.md): its health and its metrics with /proxyMode
	var proxyHealthz, proxyMetrics string
	if f.svc.proxy {
		proxyHealthz, proxyMetrics = f.svc.healthzAddr, f.svc.metricsAddr
	}
	if proxyHealthz != "" {
		ls = append(ls, listen{"--proxy-healthz-addr", proxyHealthz, false})
	}
	var waits []func() error
	stop := func() {
		for _, w := range waits {
			_ = w()
		}
	}
	if len(ls) == 0 {
		return nil, stop, nil
	}
	h := &agent.Health{Metrics: agent.NewMetrics()}
	h.SetRunning(true)
	if proxyMetrics != "" {
		ls = append(ls, listen{"--proxy-metrics-addr", proxyMetrics, true})
	}
	for _, l := range ls {
		var hh http.Handler = h
		switch {
		case l.flag == "--proxy-metrics-addr":
			hh = h.ProxyStatus()
		case !l.metrics:
			hh = h.Probes()
		}
		w, err := agent.ServeHealth(ctx, l.addr, hh, log)
		if err != nil {
			stop()
			return nil, nil, fmt.Errorf("%s: %w", l.flag, err)
		}
		waits = append(waits, w)
	}
	return h, stop, nil
}
