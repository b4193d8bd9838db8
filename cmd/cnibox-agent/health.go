package main

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/cnibox/cnibox/agent"
)

// serveHealth serves /healthz, /readyz and /metrics on --health-addr
// (cnibox's) and on --healthz-ip:--healthz-port (flanneld's; the port 0
// serves nothing), one Health behind both. /healthz answers 200 from here
// on, as flanneld's does once its server listens; /readyz once the agent
// holds its lease with the device up. With neither flag it returns a nil
// Health (the agent ignores it).
func serveHealth(ctx context.Context, f *flags, log *slog.Logger) (*agent.Health, func(), error) {
	type listen struct{ flag, addr string }
	var ls []listen
	if f.healthAddr != "" {
		ls = append(ls, listen{"--health-addr", f.healthAddr})
	}
	if a := f.healthzAddr(); a != "" && a != f.healthAddr {
		ls = append(ls, listen{"--healthz-ip/--healthz-port", a})
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
	for _, l := range ls {
		w, err := agent.ServeHealth(ctx, l.addr, h, log)
		if err != nil {
			stop()
			return nil, nil, fmt.Errorf("%s: %w", l.flag, err)
		}
		waits = append(waits, w)
	}
	return h, stop, nil
}
