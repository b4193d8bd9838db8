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
	"sync"
	"time"

	"github.com/cnibox/cnibox/internal/agentapi"
	"github.com/cnibox/cnibox/internal/wbpool"
)

// PendingDir is where releases wait for the API, in the data directory:
// the role's queue when it cannot reach the agent, and the agent's own.
const PendingDir = agentapi.PendingDir

// Server answers the whereabouts role's calls.
type Server struct {
	Alloc   *Allocator
	DataDir string // the node's data directory (PendingDir is in it)
	Log     *slog.Logger

	// queueMu orders the writes of queued releases: one is written, and
	// its file removed, under it, so that a release an ADD of the same
	// attachment wrote already is not written again after that ADD.
	queueMu sync.Mutex
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
		if err = s.settle(ctx, req.IPAM); err == nil {
			out.IPs, err = s.Alloc.Add(ctx, req.IPAM)
		}
		if unavailable(err) {
			// A write that timed out may still land: release it when the
			// API answers (nothing to release then is a no-op).
			if qerr := s.queue(req.IPAM); qerr != nil {
				s.Log.Warn("cluster IPAM: queueing the undo of a failed ADD", "container", req.IPAM.ContainerID, "err", qerr)
			}
		}
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
		resp.Fail(err)
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

// queue writes the release into PendingDir, in place of one queued
// before for the same attachment.
func (s *Server) queue(req *agentapi.IPAMRequest) error {
	s.queueMu.Lock() // not between a queued write and its file's removal
	defer s.queueMu.Unlock()
	_, err := agentapi.QueueRelease(s.DataDir, req)
	return err
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
		if !s.writeQueued(ctx, path, 20*time.Second) {
			return // still down: try later, in order
		}
	}
}

// writeQueued writes the release queued at path, if it is still there (an
// ADD may have written it meanwhile), and removes the file; false: the API
// still does not answer. The file is read under queueMu, so a release
// queued again meanwhile is the one written.
func (s *Server) writeQueued(ctx context.Context, path string, timeout time.Duration) bool {
	s.queueMu.Lock()
	defer s.queueMu.Unlock()
	req, err := readQueued(path)
	if errors.Is(err, os.ErrNotExist) {
		return true
	}
	if err != nil {
		s.Log.Warn("cluster IPAM: dropping an unreadable queued release", "file", path, "err", err)
		os.Remove(path)
		return true
	}
	cctx, cancel := context.WithTimeout(ctx, timeout)
	err = s.Alloc.Del(cctx, req)
	cancel()
	if unavailable(err) {
		return false
	}
	if err != nil {
		s.Log.Warn("cluster IPAM: dropping a queued release the agent cannot write", "file", path, "err", err)
	} else {
		s.Log.Info("cluster IPAM: queued release written", "container", req.ContainerID, "ifname", req.IfName)
	}
	os.Remove(path)
	return true
}

// settle writes the queued release of req's attachment, if any, before
// its ADD: runtimes add a container again under the same ID (podman's
// restart, a retried ADD), and a release written after that ADD would free
// the address the container holds.
func (s *Server) settle(ctx context.Context, req *agentapi.IPAMRequest) error {
	path := agentapi.PendingPath(s.DataDir, req)
	if _, err := os.Stat(path); err != nil {
		return nil // none
	}
	if !s.writeQueued(ctx, path, CallTimeout) {
		return &agentapi.Error{Reason: agentapi.ReasonUnavailable, Msg: fmt.Sprintf("a release of %s/%s queued while the API was down cannot be written yet, and must be before its ADD", req.ContainerID, req.IfName)}
	}
	return nil
}

// readQueued reads one queued release.
func readQueued(path string) (*agentapi.IPAMRequest, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var req agentapi.IPAMRequest
	if err := json.Unmarshal(b, &req); err != nil {
		return nil, err
	}
	return &req, nil
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
