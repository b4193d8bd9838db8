package main

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"

	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/test/internal/benchnode"
)

// node is one node namespace of a side (benchnode.NS): its underlay eth0,
// its pod bridge cni0 (br_netfilter on), its agent and the watch of its
// nftables.
type node struct {
	*benchnode.NS
	i      int
	nsName string
	ns     string // the namespace's path
	h      *netops.Handle
	dir    string
	agent  *benchnode.Proc
	watch  *nftWatch
	pods   []string // named namespaces of the request/response pods (node 0)
}

const podBridge = "cni0"

// newNode makes node i of a side (tag keeps the sides' names apart).
func (c *cluster) newNode(tag string, i int) (*node, error) {
	n := &node{i: i, nsName: fmt.Sprintf("bp%s-%d-%d", tag, os.Getpid(), i), dir: filepath.Join(c.dir, tag, nodeName(i))}
	if err := os.MkdirAll(n.dir, 0o700); err != nil {
		return n, err
	}
	ns, err := benchnode.NewNS(n.nsName, benchnode.Wire{
		Host: c.h, HostVeth: fmt.Sprintf("bp%s%d", tag, i), Bridge: underlayBridge, Addr: netip.PrefixFrom(nodeIP(i), 16),
	})
	if ns != nil {
		n.NS, n.ns, n.h = ns, ns.Path, ns.H
	}
	if err != nil {
		return n, err
	}
	if _, err := n.h.EnsureBridge(netops.BridgeOpts{Name: podBridge}); err != nil {
		return n, err
	}
	if err := n.h.EnsureAddr(podBridge, bridgeAddr(i), netops.AddrOpts{NoDAD: true}); err != nil {
		return n, err
	}
	// Bridged pod traffic meets the forward hook, as on a kubelet node
	// (both agents need it; cnibox's would turn it on itself).
	if err := n.h.SetSysctls(netops.SysctlSetting{Key: "net.bridge.bridge-nf-call-iptables", Value: "1"},
		netops.SysctlSetting{Key: "net.ipv4.ip_forward", Value: "1"}); err != nil {
		return n, fmt.Errorf("br_netfilter: %w", err)
	}
	n.watch, err = watchNFT(n.ns)
	return n, err
}

// addRRPods puts the two request/response pods on node 0's bridge, the
// second serving TCP rrPort and rrClosedPort.
func (n *node) addRRPods() error {
	br, err := n.h.LinkByName(podBridge)
	if err != nil {
		return err
	}
	for k, ip := range rrAddrs {
		name := fmt.Sprintf("%s-rr%d", n.nsName, k)
		path, err := netops.CreateNamedNS(name)
		if err != nil {
			return err
		}
		n.pods = append(n.pods, name)
		ph, err := netops.Open(path)
		if err != nil {
			return err
		}
		err = func() error {
			defer ph.Close()
			if err := ph.SetLinkUp("lo"); err != nil {
				return err
			}
			if _, _, err := n.h.EnsureVeth(netops.VethOpts{HostName: fmt.Sprintf("rrveth%d", k), PeerName: "eth0", Peer: ph, MasterIndex: br.Index}); err != nil {
				return err
			}
			if err := ph.EnsureAddr("eth0", netip.PrefixFrom(ip, 16), netops.AddrOpts{NoDAD: true}); err != nil {
				return err
			}
			return ph.EnsureRoute(netops.Route{GW: bridgeAddr(0).Addr(), Dev: "eth0"})
		}()
		if err != nil {
			return err
		}
	}
	return serveRR(filepath.Join(netops.NamedNSDir, n.pods[1]))
}

// start runs the side's agent in the node's namespace.
func (n *node) start(bin string, env []string, args ...string) error {
	a, err := benchnode.Start(benchnode.StartOpts{Bin: bin, Args: args, Env: env, Log: filepath.Join(n.dir, "agent.log"), NS: n.ns})
	if err != nil {
		return err
	}
	n.agent = a
	return nil
}

// exited is the agent's exit, if it has ended.
func (n *node) exited() error {
	if n.agent == nil {
		return nil
	}
	return n.agent.ExitError("the agent on "+nodeName(n.i), 2500)
}

func (n *node) logTail() string { return n.agent.LogTail(2500) }

// mem is the agent's resident set, its peak and its own pages.
func (n *node) mem() benchnode.Mem {
	return benchnode.ReadMem(n.agent.Pid())
}

// close stops the agent and removes the node's namespaces.
func (n *node) close() {
	n.agent.Stop()
	if n.watch != nil {
		n.watch.close()
	}
	for _, p := range n.pods {
		netops.DeleteNamedNS(p)
	}
	if n.NS != nil {
		n.NS.Close()
	} else {
		netops.DeleteNamedNS(n.nsName)
	}
}
