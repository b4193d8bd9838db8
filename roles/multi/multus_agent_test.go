package multi_test

import (
	"bufio"
	"encoding/json"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/cnibox/cnibox/internal/agentapi"
	"github.com/cnibox/cnibox/roles"
	"github.com/cnibox/cnibox/roles/internal/delegatetest"
	"github.com/cnibox/cnibox/roles/internal/roletest"
	"github.com/cnibox/cnibox/store"
)

// podAgent answers multi's pod API on a unix socket from what the test
// puts in it: the agent's side of internal/agentapi without the API server
// (test/overlay's TestKubeMultus runs the real agent against a real one).
// It keeps what multi wrote: network-status and events per pod.
type podAgent struct {
	sock    string
	mu      sync.Mutex
	pods    map[string]map[string]string // "ns/name" -> annotations
	nads    map[string]agentapi.NetAttachDef
	devices map[string]map[string][]string // pod -> resource -> device IDs
	status  map[string]string
	events  map[string][]agentapi.Event
	asked   []agentapi.Request
	// refused are NADs the agent's policy refuses, with its message.
	refused map[string]string
}

func newPodAgent(t *testing.T) *podAgent {
	t.Helper()
	g := &podAgent{sock: filepath.Join(t.TempDir(), "agent.sock"), pods: map[string]map[string]string{}, nads: map[string]agentapi.NetAttachDef{},
		devices: map[string]map[string][]string{}, status: map[string]string{}, events: map[string][]agentapi.Event{}, refused: map[string]string{}}
	ln, err := net.Listen("unix", g.sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go g.serve(c)
		}
	}()
	return g
}

func (g *podAgent) serve(c net.Conn) {
	defer c.Close()
	line, err := agentapi.ReadLine(bufio.NewReader(c))
	if err != nil {
		return
	}
	var req agentapi.Request
	json.Unmarshal(line, &req)
	g.mu.Lock()
	defer g.mu.Unlock()
	g.asked = append(g.asked, req)
	key := req.Namespace + "/" + req.Name
	resp := agentapi.Response{}
	notFound := func() { resp.Error, resp.Reason = key+": not found", agentapi.ReasonNotFound }
	switch req.Op {
	case agentapi.OpPod:
		if ann, ok := g.pods[key]; ok {
			resp.Pod = &agentapi.Pod{Namespace: req.Namespace, Name: req.Name, UID: "uid-" + req.Name, Annotations: ann}
		} else {
			notFound()
		}
	case agentapi.OpNetAttachDef:
		if msg, ok := g.refused[key]; ok {
			resp.Error, resp.Reason = msg, agentapi.ReasonPolicy
		} else if nad, ok := g.nads[key]; ok {
			resp.NetAttachDef = &nad
		} else {
			notFound()
		}
	case agentapi.OpSetNetworkStatus:
		g.status[key] = string(req.NetworkStatus)
	case agentapi.OpEvents:
		g.events[key] = append(g.events[key], req.Events...)
	case agentapi.OpPodDevices:
		resp.Devices = g.devices[key]
		if resp.Devices == nil {
			resp.Devices = map[string][]string{}
		}
	}
	b, _ := json.Marshal(resp)
	c.Write(append(b, '\n'))
}

func (g *podAgent) pod(ns, name string, ann map[string]string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.pods[ns+"/"+name] = ann
}

func (g *podAgent) nad(ns, name, config string, ann ...string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := agentapi.NetAttachDef{Namespace: ns, Name: name, Config: config}
	if len(ann) > 0 {
		n.ResourceName = ann[0]
	}
	g.nads[ns+"/"+name] = n
}

// networkStatus returns the pod's network-status as written.
func (g *podAgent) networkStatus(t *testing.T, ns, name string) []map[string]any {
	t.Helper()
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []map[string]any
	if err := json.Unmarshal([]byte(g.status[ns+"/"+name]), &out); err != nil {
		t.Fatalf("network-status of %s/%s: %v (%q)", ns, name, err, g.status[ns+"/"+name])
	}
	return out
}

// fullNode is a test node with every role of the binary in process
// (macvlan, tuning, bandwidth, portmap, ...).
func fullNode(t *testing.T) *delegatetest.Node {
	t.Helper()
	n := &delegatetest.Node{Node: roletest.NewNodeWith(t, roles.Registry())}
	t.Setenv(store.EnvDataDir, n.Dir)
	return n
}

// statusOf returns the network-status entry of interface ifname.
func statusOf(t *testing.T, st []map[string]any, ifname string) map[string]any {
	t.Helper()
	for _, e := range st {
		if e["interface"] == ifname {
			return e
		}
	}
	t.Fatalf("network-status has no entry for %s: %v", ifname, st)
	return nil
}

// jsonq renders v for messages.
func jsonq(v any) string {
	b, _ := json.Marshal(v)
	return strings.TrimSpace(string(b))
}
