//go:build kube

package node

import (
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nstest"
	"github.com/cnibox/cnibox/store"
)

// egressIP is the gateway's address in TestKubeNodeEgress, on the
// underlay's network (172.31.250.0/24).
var egressIP = netip.MustParseAddr("172.31.250.50")

// egressPort is the recorder's port (for the diagnostics).
var egressPort uint16

// recorder is the server outside the cluster: a TCP listener in the
// control plane's namespace (the underlay's router, 172.31.250.1) that
// records when each connection came and from which source.
type recorder struct {
	addr netip.AddrPort
	mu   sync.Mutex
	seen []seenConn
}

type seenConn struct {
	at  time.Time
	src netip.Addr
}

func newRecorder(t *testing.T, c *cluster) *recorder {
	t.Helper()
	r := &recorder{}
	var ln net.Listener
	if err := nstest.Run(t, fmt.Sprintf("/proc/%d/ns/net", c.init), func() (err error) {
		ln, err = net.Listen("tcp", clusterUplink+":0")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	r.addr = netip.MustParseAddrPort(ln.Addr().String())
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			src := netip.MustParseAddrPort(conn.RemoteAddr().String()).Addr().Unmap()
			r.mu.Lock()
			r.seen = append(r.seen, seenConn{time.Now(), src})
			r.mu.Unlock()
			fmt.Fprintf(conn, "%s\n", src)
			conn.Close()
		}
	}()
	return r
}

// firstFrom is the first connection from src at or after since.
func (r *recorder) firstFrom(src netip.Addr, since time.Time) (time.Time, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range r.seen {
		if s.src == src && !s.at.Before(since) {
			return s.at, true
		}
	}
	return time.Time{}, false
}

// egressHolders are the nodes whose eth0 holds the egress address, read
// from their kernels (a node that is gone holds nothing).
func egressHolders(c *cluster) []string {
	var out []string
	for _, n := range c.nodes {
		if n.stopped {
			continue
		}
		h, err := netops.Open(fmt.Sprintf("/proc/%d/ns/net", n.init))
		if err != nil {
			continue
		}
		ps, err := h.Addrs("eth0")
		h.Close()
		if err == nil && slices.Contains(ps, netip.PrefixFrom(egressIP, 32)) {
			out = append(out, n.name)
		}
	}
	return out
}

// inspectEgress is `cnibox inspect egress --json` on n.
func inspectEgress(n *node) (store.EgressState, error) {
	var st store.EgressState
	out, err := n.onNode("/opt/cni/bin/cnibox", "inspect", "egress", "--json")
	if err != nil {
		return st, fmt.Errorf("%v: %s", err, out)
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		return st, fmt.Errorf("%v: %s", err, out)
	}
	return st, nil
}

// TestKubeNodeEgress: EgressGateway on three kubelet nodes with cnibox's
// manifest (vxlan), a server outside the cluster on the underlay (the
// control plane's namespace) recording each connection's source. Selected
// pods leave from the egress address, from the holder's node and from
// another; an unselected one from its node's address. The holder's agent
// killed, the holder cut off from the API, every agent restarted, the
// holder node stopped: each time one eligible node holds the address,
// never two at once (the kernels every 50 ms, ARP from the underlay
// every 20 ms), and a selected pod's connections come from it again. The
// gateway deleted: the pods leave from their nodes, and no node keeps an
// egress rule, route or address.
func TestKubeNodeEgress(t *testing.T) {
	imageTar := env(t, "CNIBOX_IMAGE_TAR", "make image's archive (bin/cnibox-image.tar)")
	d := deploymentOf(t, env(t, "CNIBOX_MANIFEST", "make image's manifest (bin/cnibox.yaml)"))
	c := startCluster(t, 3)
	c.importImages(imageTar)
	n1, n2, n3 := c.nodes[0], c.nodes[1], c.nodes[2]
	crd, err := os.ReadFile("../../deploy/kubernetes/egressgateway-crd.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if out, err := c.kubectlIn(string(crd), "apply", "-f", "-"); err != nil {
		t.Fatalf("kubectl apply -f egressgateway-crd.yaml: %v\n%s", err, out)
	}
	c.crdEstablished("egressgateways.cnibox.io")
	if out, err := c.kubectlIn(d.yaml, "apply", "-f", "-"); err != nil {
		t.Fatalf("kubectl apply -f the manifest: %v\n%s", err, out)
	}
	c.must("wait", "--for=condition=Ready", "node", "--all", c.timeout())
	c.must("-n", "kube-system", "rollout", "status", "ds/cnibox", c.timeout())
	c.must("label", "node", n1.name, n2.name, "egress=true")
	t.Cleanup(func() { // (before the nodes stop: cleanups run last first)
		if !t.Failed() {
			return
		}
		for _, n := range c.nodes {
			if n.stopped {
				continue
			}
			for _, args := range [][]string{{"ip", "-4", "addr", "show", "dev", "eth0"}, {"ip", "rule"}, {"ip", "route", "show", "table", "all", "type", "unicast"},
				{"nft", "list", "table", "ip", "cnibox-egress"}, {"conntrack", "-L", "-p", "tcp", "--dport", fmt.Sprint(egressPort)}} {
				out, err := n.onNode(args...)
				t.Logf("%s: %s: %v\n%s", n.name, strings.Join(args, " "), err, out)
			}
		}
		out, err := c.kubectl("get", "egressgateway", "-o", "yaml")
		t.Logf("kubectl get egressgateway -o yaml: %v\n%s", err, out)
	})
	rec := newRecorder(t, c)
	egressPort = rec.addr.Port()
	nc := func(pod string) []string {
		return []string{"exec", pod, "--", "nc", "-w", "2", rec.addr.Addr().String(), fmt.Sprint(rec.addr.Port())}
	}
	// (b-2: node-2 runs a pod, so that it forwards: the bridge role turns
	// forwarding on with a node's first pod, and a node that does not
	// forward holds no address)
	for _, p := range []struct{ name, node, app string }{{"a-1", n1.name, "egress"}, {"b-2", n2.name, "other"}, {"a-3", n3.name, "egress"}, {"b-3", n3.name, "other"}} {
		c.apply(busyboxPod("default", p.name, p.node, map[string]string{"app": p.app}, nil, "sleep", "86400"))
	}
	// The probe: a selected pod on n3 connects every 100 ms.
	probe := fmt.Sprintf("while true; do nc -w 1 %s %d </dev/null >/dev/null; usleep 100000; done", rec.addr.Addr(), rec.addr.Port())
	c.apply(busyboxPod("default", "probe-3", n3.name, map[string]string{"app": "egress"}, nil, "sh", "-c", probe))
	c.must("wait", "--for=condition=Ready", "pod/a-1", "pod/b-2", "pod/a-3", "pod/b-3", "pod/probe-3", c.timeout())
	seenAs := func(what, pod string, want netip.Addr) {
		t.Helper()
		c.poll(fmt.Sprintf("%s: %s's connections seen from %s", what, pod, want), func() error {
			out, err := c.kubectl(nc(pod)...)
			if err != nil {
				return fmt.Errorf("%v: %s", err, out)
			}
			if got := strings.TrimSpace(out); got != want.String() {
				return fmt.Errorf("seen from %q", got)
			}
			return nil
		})
	}
	node3 := netip.MustParseAddr(n3.ip)
	seenAs("no gateway yet", "a-3", node3)

	// The watchers: never two holders.
	arpc := nstest.NewARPProber(t, fmt.Sprintf("/proc/%d/ns/net", c.init), "br0")
	defer nstest.WatchOneHolder(t, arpc, egressIP, 50*time.Millisecond, func() []string { return egressHolders(c) })()

	holderNode := func(not string) *node {
		t.Helper()
		var hs []string
		c.poll("one node but "+not+" holds "+egressIP.String(), func() error {
			if hs = egressHolders(c); len(hs) != 1 || hs[0] == not {
				return fmt.Errorf("holders %v", hs)
			}
			return nil
		})
		return c.nodes[slices.IndexFunc(c.nodes, func(n *node) bool { return n.name == hs[0] })]
	}
	var holder *node
	step(t, "a gateway for app=egress on nodes labelled egress=true", func() {
		c.apply(`{"apiVersion":"cnibox.io/v1alpha1","kind":"EgressGateway","metadata":{"name":"gw"},
			"spec":{"podSelector":{"matchLabels":{"app":"egress"}},"egressIPs":["` + egressIP.String() + `"],"nodeSelector":{"matchLabels":{"egress":"true"}}}}`)
		holder = holderNode("")
		if holder == n3 {
			t.Fatalf("%s, not labelled, holds the address", n3.name)
		}
		seenAs("the gateway", "a-3", egressIP)
		seenAs("the gateway", "a-1", egressIP)
		seenAs("the gateway", "b-3", node3)
		c.poll("cnibox inspect egress on "+n3.name+" names the holder and its pods there", func() error {
			st, err := inspectEgress(n3)
			if err != nil {
				return err
			}
			if len(st.Gateways) != 1 || len(st.Gateways[0].IPs) != 1 || st.Gateways[0].IPs[0].Holder != holder.name ||
				!slices.Equal(st.Gateways[0].IPs[0].LocalPods, []string{"default/a-3", "default/probe-3"}) {
				return fmt.Errorf("%+v", st.Gateways)
			}
			return nil
		})
		// Both labelled nodes may hold it (each forwards since its first
		// pod: the agent sees the bridge role turn forwarding on), so that
		// the address has somewhere to move to below.
		for _, n := range []*node{n1, n2} {
			c.poll("cnibox inspect egress on "+n.name+": the node may hold the address", func() error {
				st, err := inspectEgress(n)
				if err != nil {
					return err
				}
				if len(st.Gateways) != 1 || len(st.Gateways[0].IPs) != 1 || !st.Gateways[0].IPs[0].Eligible {
					return fmt.Errorf("%+v", st.Gateways)
				}
				return nil
			})
		}
		c.poll("the gateway's status names "+holder.name, func() error {
			out, err := c.kubectl("get", "egressgateway", "gw", "-o", `jsonpath={.status.egressIPs[0].node} {.status.conditions[?(@.type=="Ready")].status}`)
			if err != nil || strings.TrimSpace(out) != holder.name+" True" {
				return fmt.Errorf("%q %v", out, err)
			}
			return nil
		})
	})
	step(t, "the holder's agent killed, and again as it comes back: the address moves", func() {
		// The kubelet restarts a killed agent within a second or so, before
		// the Lease runs out: that agent renews its node's hold (the
		// address lapses for a moment at most). Killed again as it comes
		// back for 4 s, it waits out the kubelet's back-off, and the
		// address moves; the agent that then starts leaves the new holder
		// be.
		old := holder
		t0 := time.Now()
		killed := 0
		for time.Since(t0) < 4*time.Second {
			if pid := agentPID(old); pid != 0 {
				syscall.Kill(pid, syscall.SIGKILL)
				killed++
			}
			time.Sleep(20 * time.Millisecond)
		}
		if killed == 0 {
			t.Fatalf("no agent process on %s", old.name)
		}
		holder = holderNode(old.name)
		t.Logf("%s's agent killed %d times in 4 s: %s holds the address", old.name, killed, holder.name)
		seenAs("with "+old.name+"'s agent gone", "a-3", egressIP)
		c.poll("a new agent on "+old.name+" serving egress gateways, holding nothing", func() error {
			out, err := old.onNode("curl", "-sf", "http://127.0.0.1:9666/metrics")
			if err != nil {
				return fmt.Errorf("%v: %s", err, out)
			}
			if !strings.Contains(out, "cnibox_agent_egress_addresses_held 0\n") {
				return fmt.Errorf("no cnibox_agent_egress_addresses_held 0")
			}
			return nil
		})
		seenAs("after "+old.name+"'s agent came back", "a-3", egressIP)
		if hs := egressHolders(c); !slices.Equal(hs, []string{holder.name}) {
			t.Errorf("after %s's agent came back: holders %v, want %s", old.name, hs, holder.name)
		}
	})
	step(t, "the holder cut off from the API", func() {
		// (its own traffic to port 443: the API server's, at the
		// kubernetes Service's address or the control plane's)
		old := holder
		if out, err := old.onNode("nft", "add table ip egtest; add chain ip egtest out { type filter hook output priority 0; }; add rule ip egtest out tcp dport 443 drop"); err != nil {
			t.Fatalf("cut %s off: %v %s", old.name, err, out)
		}
		t0 := time.Now()
		holder = holderNode(old.name)
		t.Logf("%s cut off from the API: %s holds the address after %v", old.name, holder.name, time.Since(t0).Round(time.Millisecond))
		c.poll(holder.name+"'s metrics count the takeover", func() error {
			out, err := holder.onNode("curl", "-sf", "http://127.0.0.1:9666/metrics")
			if err != nil {
				return fmt.Errorf("%v: %s", err, out)
			}
			for _, want := range []string{"cnibox_agent_egress_addresses_held 1\n", "cnibox_agent_egress_takeovers_total ", "cnibox_agent_egress_takeover_seconds_count "} {
				i := strings.Index(out, want)
				if i < 0 || (want != "cnibox_agent_egress_addresses_held 1\n" && strings.HasPrefix(out[i+len(want):], "0")) {
					return fmt.Errorf("no %q (or zero)", want)
				}
			}
			return nil
		})
		if out, err := old.onNode("nft", "delete table ip egtest"); err != nil {
			t.Fatalf("heal %s: %v %s", old.name, err, out)
		}
		seenAs("after the cut", "a-3", egressIP)
	})
	step(t, "every agent restarted", func() {
		c.must("-n", "kube-system", "rollout", "restart", "ds/cnibox")
		c.must("-n", "kube-system", "rollout", "status", "ds/cnibox", c.timeout())
		holder = holderNode("")
		seenAs("after the restarts", "a-3", egressIP)
	})
	step(t, "the holder node stopped", func() {
		old := holder
		t0 := time.Now()
		old.stop()
		t1 := time.Now() // the node is gone: its processes and namespaces
		holder = holderNode(old.name)
		var first time.Time
		c.poll("the probe's connections from "+egressIP.String()+" again", func() error {
			var ok bool
			if first, ok = rec.firstFrom(egressIP, t1); !ok {
				return fmt.Errorf("none yet")
			}
			return nil
		})
		t.Logf("%s stopped (the stop took %v): %s holds the address; the probe's first connection from it after the stop came %v after the stop began",
			old.name, t1.Sub(t0).Round(time.Millisecond), holder.name, first.Sub(t0).Round(time.Millisecond))
	})
	step(t, "the gateway deleted: the nodes' addresses again, nothing left", func() {
		c.must("delete", "egressgateway", "gw")
		seenAs("no gateway", "a-3", node3)
		c.poll("no egress rule, route or address on any node", func() error {
			var left []string
			for _, n := range c.nodes {
				if n.stopped {
					continue
				}
				h, err := netops.Open(fmt.Sprintf("/proc/%d/ns/net", n.init))
				if err != nil {
					return err
				}
				rules, err1 := h.NFT().EgressRules()
				routes, err2 := h.EgressRoutes()
				h.Close()
				if err1 != nil || err2 != nil || len(rules) > 0 || len(routes) > 0 {
					left = append(left, fmt.Sprintf("%s: rules %q routes %v (%v %v)", n.name, rules, routes, err1, err2))
				}
			}
			if hs := egressHolders(c); len(hs) > 0 {
				left = append(left, fmt.Sprintf("the address on %v", hs))
			}
			if len(left) > 0 {
				return fmt.Errorf("%s", strings.Join(left, "; "))
			}
			return nil
		})
	})
}
