package whereabouts

import (
	"context"
	"errors"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/internal/agentapi"
	"github.com/cnibox/cnibox/store"
)

// PendingDir is the directory, in the node's data directory, where a DEL
// that could not reach the agent leaves its release for the agent to write
// when it is back (agentapi.QueueRelease).
const PendingDir = agentapi.PendingDir

// del releases the attachment's addresses. DEL never fails for want of the
// agent or the API server: the agent queues what it cannot write yet, and
// a DEL that cannot reach the agent leaves the release in PendingDir.
func del(ctx context.Context, a *cniplug.Args, cfg *config) error {
	if len(cfg.Ranges) == 0 {
		return nil
	}
	req, resp, err := cfg.ask(ctx, a, agentapi.OpIPAMDel, delTimeout, nil)
	var un *agentapi.UnreachableError
	switch {
	case errors.As(err, &un):
		path, perr := agentapi.QueueRelease(store.DirFrom(cfg.DataDir, a.Getenv), req)
		if perr != nil {
			return cniplug.Errorf(5, "whereabouts: release %s/%s: cnibox-agent is unreachable (%v) and the release cannot be queued: %w", a.ContainerID, a.IfName, err, perr)
		}
		cfg.logf(a, "error", "DEL %s/%s: cnibox-agent unreachable (%v); release queued in %s", a.ContainerID, a.IfName, err, path)
		return nil
	case err != nil:
		return agentErr(cfg, "release the addresses", err)
	}
	cfg.logf(a, "debug", "DEL %s/%s of pod %q (queued: %v)", a.ContainerID, a.IfName, req.PodRef, resp.Queued)
	return nil
}
