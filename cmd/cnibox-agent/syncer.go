//go:build !nokube

package main

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/cnibox/cnibox/agent/policynft"
)

// The agent's one syncer of the policy tables (agent/policynft): the
// NetworkPolicy watcher's model and MultiNetworkPolicy's pod tables are
// its inputs, on one loop, with one backoff and one resync
// (--policy-resync). The first of them to start it (the pod API's
// MultiNetworkPolicy watcher starts before the NetworkPolicy watcher) runs
// its loop until the agent's context ends.
var theSyncer struct {
	once sync.Once
	s    *policynft.Syncer
	err  error
}

// policySyncer returns the agent's syncer, started on its first call.
func policySyncer(ctx context.Context, f *flags, log *slog.Logger) (*policynft.Syncer, error) {
	theSyncer.once.Do(func() {
		s, err := policynft.New("")
		if err != nil {
			theSyncer.err = fmt.Errorf("policy tables: %w", err)
			return
		}
		s.ResyncEvery(time.Duration(f.policyResync) * time.Second)
		theSyncer.s = s
		go func() {
			defer s.Close()
			s.Run(ctx, log)
		}()
	})
	return theSyncer.s, theSyncer.err
}
