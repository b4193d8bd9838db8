// Package podapi is cnibox-agent's pod API: a unix socket on which the multi
// CNI role asks for a pod's annotations and NetworkAttachmentDefinitions,
// and has the pod's network-status annotation written, without linking
// client-go itself (Multus' "thick" design). The protocol is
// internal/agentapi's: one JSON request line, one JSON response line per
// connection. The Kubernetes side (kube.go) reads the pods of this node
// from the agent's informer cache (agent/cluster), which keeps their UIDs
// and annotations.
//
// Its Kubernetes side (kube.go) links client-go and is left out of the
// etcd-only agent (tag nokube), which serves only the cluster IPAM on the
// socket: only cmd/cnibox-agent may import it.
package podapi

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/cnibox/cnibox/internal/agentapi"
	"github.com/cnibox/cnibox/internal/unixsock"
)

// Source answers the pod API's questions.
type Source interface {
	Pod(ctx context.Context, namespace, name, uid string) (*agentapi.Pod, error)
	NetAttachDef(ctx context.Context, namespace, name string) (*agentapi.NetAttachDef, error)
	SetNetworkStatus(ctx context.Context, namespace, name, uid string, status json.RawMessage) error
}

// callTimeout bounds one request, API calls included.
const callTimeout = 20 * time.Second

// ipamCallTimeout bounds a cluster IPAM call (whereabouts' AddTimeLimit).
const ipamCallTimeout = 2 * time.Minute

// Listen creates the socket at path (its directory too; a stale socket of
// an earlier run is replaced), mode 0600 from the start, or 0660 with the
// group gid when gid is not NoGroup (--pod-api-group). It sets the process
// umask for the moment of the bind: call it before other goroutines create
// files.
func Listen(path string, gid int) (net.Listener, error) {
	return unixsock.ListenNamed(path, gid, "pod API socket", "another process serves it (a second cnibox-agent?): stop it or choose another --socket")
}

// Serve answers on ln until ctx ends, then closes ln and removes its socket
// file. It answers only callers that run as root or with the group gid
// (NoGroup: root only); others get their connection closed, and a log line.
// acc says who may call and which NADs are honoured. src may be nil when the
// socket serves only acc.IPAM.
func Serve(ctx context.Context, ln net.Listener, src Source, log *slog.Logger, acc Access) error {
	if log == nil {
		log = slog.Default()
	}
	var wg sync.WaitGroup
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	defer wg.Wait()
	for {
		conn, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return fmt.Errorf("pod API: accept: %w", err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := checkPeer(conn, acc.GID); err != nil {
				log.Warn("pod API: caller refused", "err", err)
				conn.Close()
				return
			}
			serveConn(ctx, conn, src, log, acc)
		}()
	}
}

func serveConn(ctx context.Context, conn net.Conn, src Source, log *slog.Logger, acc Access) {
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	_ = conn.SetDeadline(time.Now().Add(callTimeout + time.Second))
	line, err := agentapi.ReadLine(bufio.NewReader(conn))
	if err != nil {
		log.Debug("pod API: read a request", "err", err)
		return
	}
	var req agentapi.Request
	resp := &agentapi.Response{}
	if err := json.Unmarshal(line, &req); err != nil {
		resp.Error, resp.Reason = fmt.Sprintf("the request is not JSON: %v", err), agentapi.ReasonBadRequest
	} else {
		if strings.HasPrefix(req.Op, "ipam-") {
			// A busy cluster pool takes longer: whereabouts' own limit.
			ctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), ipamCallTimeout)
			defer cancel()
			_ = conn.SetDeadline(time.Now().Add(ipamCallTimeout + time.Second))
		}
		resp = handle(ctx, src, req, acc)
	}
	log.Debug("pod API", "op", req.Op, "pod", req.Namespace+"/"+req.Name, "err", resp.Error)
	b, _ := json.Marshal(resp)
	_, _ = conn.Write(append(b, '\n'))
}

func handle(ctx context.Context, src Source, req agentapi.Request, acc Access) *agentapi.Response {
	resp := &agentapi.Response{}
	if strings.HasPrefix(req.Op, "ipam-") {
		if acc.IPAM == nil {
			resp.Error, resp.Reason = fmt.Sprintf("%s: this cnibox-agent does not serve the cluster IPAM: start it with --cluster-ipam", req.Op), agentapi.ReasonNotServed
			return resp
		}
		return acc.IPAM(ctx, req)
	}
	if strings.HasPrefix(req.Op, "policy-") {
		if acc.Policy == nil {
			resp.Error, resp.Reason = fmt.Sprintf("%s: this cnibox-agent enforces no NetworkPolicy", req.Op), agentapi.ReasonNotServed
			return resp
		}
		return acc.Policy(ctx, req)
	}
	if src == nil {
		resp.Error, resp.Reason = fmt.Sprintf("%s: this cnibox-agent does not serve the pod API: start it with --pod-api", req.Op), agentapi.ReasonUnavailable
		return resp
	}
	if req.Namespace == "" || req.Name == "" {
		resp.Error, resp.Reason = fmt.Sprintf("%s: namespace and name are required", req.Op), agentapi.ReasonBadRequest
		return resp
	}
	err := agentapi.CheckNames(req.Namespace, req.Name)
	switch {
	case err != nil:
	case req.Op == agentapi.OpPod:
		resp.Pod, err = src.Pod(ctx, req.Namespace, req.Name, req.UID)
	case req.Op == agentapi.OpNetAttachDef && acc.NamespaceIsolation && req.PodNamespace != "" && req.Namespace != "default" && req.Namespace != req.PodNamespace:
		err = &agentapi.Error{Reason: agentapi.ReasonPolicy, Msg: fmt.Sprintf("network-attachment-definition %s/%s: namespace isolation (--pod-api-namespace-isolation) honours NADs only from the pod's namespace %q and \"default\"", req.Namespace, req.Name, req.PodNamespace)}
	case req.Op == agentapi.OpNetAttachDef:
		resp.NetAttachDef, err = src.NetAttachDef(ctx, req.Namespace, req.Name)
		if err == nil {
			err = checkNADConfig(resp.NetAttachDef, acc.NADTrust)
		}
		if err == nil {
			err = checkCNIArgs(resp.NetAttachDef, req.CNIArgs, acc.NADTrust)
		}
	case req.Op == agentapi.OpSetNetworkStatus:
		if len(req.NetworkStatus) > 0 && string(req.NetworkStatus) != "null" && !json.Valid(req.NetworkStatus) {
			err = &agentapi.Error{Reason: agentapi.ReasonBadRequest, Msg: "networkStatus is not JSON"}
		} else {
			err = src.SetNetworkStatus(ctx, req.Namespace, req.Name, req.UID, req.NetworkStatus)
		}
	case req.Op == agentapi.OpPodDevices || req.Op == agentapi.OpEvents:
		resp.Devices, err = handleMultus(ctx, src, req)
	default:
		err = &agentapi.Error{Reason: agentapi.ReasonBadRequest, Msg: fmt.Sprintf("unknown op %q: want %s, %s, %s, %s or %s", req.Op, agentapi.OpPod, agentapi.OpNetAttachDef, agentapi.OpSetNetworkStatus, agentapi.OpPodDevices, agentapi.OpEvents)}
	}
	if err != nil {
		resp.Pod, resp.NetAttachDef, resp.Devices = nil, nil, nil
		resp.Fail(err)
	}
	return resp
}
