package clusteripam

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/cnibox/cnibox/internal/agentapi"
	"github.com/cnibox/cnibox/internal/wbpool"
)

// PendingDir is where releases wait for the API, in the data directory:
// the role's queue when it cannot reach the agent, and the agent's own
// (one JSON agentapi.IPAMRequest per file; the role names the same
// directory).
const PendingDir = "whereabouts-pending"

// Server answers the whereabouts role's calls.
type Server struct {
	Alloc   *Allocator
	DataDir string // the node's data directory (PendingDir is in it)
	Log     *slog.Logger
}

// Handle answers one ipam-* request (the agent's socket hands them over).
func (s *Server) Handle(ctx context.Context, req agentapi.Request) *agentapi.Response {
	start := time.Now()
	resp := &agentapi.Response{}
	out := &agentapi.IPAMResponse{}
	var err error
	switch {
	case req.IPAM == nil:
		err = badRequest("%s: the request has no ipam part", req.Op)
	case req.Op == agentapi.OpIPAMAdd:
		out.IPs, err = s.Alloc.Add(ctx, req.IPAM)
	case req.Op == agentapi.OpIPAMDel:
		if err = s.Alloc.Del(ctx, req.IPAM); unavailable(err) {
			s.Log.Warn("cluster IPAM: release queued until the API answers", "container", req.IPAM.ContainerID, "ifname", req.IPAM.IfName, "err", err)
			err = s.queue(req.IPAM)
			out.Queued = err == nil
		}
	case req.Op == agentapi.OpIPAMCheck:
		out.IPs, err = s.Alloc.Check(ctx, req.IPAM)
	case req.Op == agentapi.OpIPAMGC:
		out.IPs, err = s.Alloc.GC(ctx, req.IPAM)
	case req.Op == agentapi.OpIPAMStatus:
		err = s.Alloc.B.Ready(ctx)
	case req.Op == agentapi.OpIPAMPools:
		out.Pools, err = s.Pools(ctx)
	default:
		err = badRequest("unknown op %q", req.Op)
	}
	s.Log.Debug("cluster IPAM", "op", req.Op, "container", cid(req.IPAM), "ips", out.IPs, "err", err, "took", time.Since(start).Round(time.Millisecond))
	if err != nil {
		resp.Error, resp.Reason = err.Error(), agentapi.ReasonUnavailable
		var ae *agentapi.Error
		if errors.As(err, &ae) {
			resp.Reason = ae.Reason
		}
		return resp
	}
	resp.IPAM = out
	return resp
}

func cid(r *agentapi.IPAMRequest) string {
	if r == nil {
		return ""
	}
	return r.ContainerID
}

// unavailable reports whether err means the API (or etcd) did not answer.
func unavailable(err error) bool {
	var ae *agentapi.Error
	return err != nil && (!errors.As(err, &ae) || ae.Reason == agentapi.ReasonUnavailable)
}

// queue writes the release into PendingDir.
func (s *Server) queue(req *agentapi.IPAMRequest) error {
	dir := filepath.Join(s.DataDir, PendingDir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("queue the release: %w", err)
	}
	b, err := json.Marshal(req)
	if err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, "agent-*.json")
	if err != nil {
		return fmt.Errorf("queue the release: %w", err)
	}
	_, werr := f.Write(b)
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	return werr
}

// Drain writes the queued releases, oldest first, every interval until ctx
// ends; a release the API still refuses stays queued.
func (s *Server) Drain(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		s.drainOnce(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (s *Server) drainOnce(ctx context.Context) {
	for _, path := range s.pending() {
		b, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		var req agentapi.IPAMRequest
		if err := json.Unmarshal(b, &req); err != nil {
			s.Log.Warn("cluster IPAM: dropping an unreadable queued release", "file", path, "err", err)
			os.Remove(path)
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		err = s.Alloc.Del(cctx, &req)
		cancel()
		if unavailable(err) {
			return // still down: try later, in order
		}
		if err != nil {
			s.Log.Warn("cluster IPAM: dropping a queued release the agent cannot write", "file", path, "err", err)
		} else {
			s.Log.Info("cluster IPAM: queued release written", "container", req.ContainerID, "ifname", req.IfName)
		}
		os.Remove(path)
	}
}

// pending lists PendingDir's files, oldest first.
func (s *Server) pending() []string {
	paths, _ := filepath.Glob(filepath.Join(s.DataDir, PendingDir, "*.json"))
	type entry struct {
		path string
		mod  time.Time
	}
	var es []entry
	for _, p := range paths {
		if st, err := os.Stat(p); err == nil {
			es = append(es, entry{p, st.ModTime()})
		}
	}
	sort.Slice(es, func(i, j int) bool { return es[i].mod.Before(es[j].mod) })
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = e.path
	}
	return out
}

// Pools lists the pools for cnibox inspect ipam and doctor, with the
// number of queued releases.
func (s *Server) Pools(ctx context.Context) ([]agentapi.IPAMPool, error) {
	pools, err := s.Alloc.B.ListPools(ctx)
	if err != nil {
		return nil, apiErr(err, "list IPPools")
	}
	var out []agentapi.IPAMPool
	for _, p := range pools {
		ip := agentapi.IPAMPool{Kind: "IPPool", Name: p.Name, Range: p.Range}
		base, _, err := wbpool.ParsePoolRange(p.Range)
		for off, a := range p.Allocations {
			addr := "offset " + off
			if ad, ok := wbpool.AddrAt(base, off); ok && err == nil {
				addr = ad.String()
			}
			ip.Allocations = append(ip.Allocations, agentapi.IPAMAllocation{IP: addr, ContainerID: a.ContainerID, PodRef: a.PodRef, IfName: a.IfName})
		}
		sort.Slice(ip.Allocations, func(i, j int) bool { return ip.Allocations[i].IP < ip.Allocations[j].IP })
		out = append(out, ip)
	}
	sps, err := s.Alloc.B.ListSlicePools(ctx)
	if err != nil {
		return nil, apiErr(err, "list NodeSlicePools")
	}
	for _, sp := range sps {
		p := agentapi.IPAMPool{Kind: "NodeSlicePool", Name: sp.Name, Range: sp.Range + " by " + sp.SliceSize}
		for _, sl := range sp.Slices {
			if sl.Node != "" {
				p.Slices = append(p.Slices, sl.Range+"="+sl.Node)
			}
		}
		out = append(out, p)
	}
	if n := len(s.pending()); n > 0 {
		out = append(out, agentapi.IPAMPool{Kind: "PendingReleases", Name: filepath.Join(s.DataDir, PendingDir), Pending: n})
	}
	return out, nil
}
