package main

import (
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/cnibox/cnibox/netops"
)

// node is one node namespace of a side: its underlay eth0, its pod bridge
// cni0 (br_netfilter on), its agent and the watch of its nftables.
type node struct {
	i      int
	nsName string
	ns     string
	h      *netops.Handle
	dir    string
	cmd    *exec.Cmd
	done   chan error
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
	var err error
	if n.ns, err = netops.CreateNamedNS(n.nsName); err != nil {
		return n, err
	}
	if n.h, err = netops.Open(n.ns); err != nil {
		return n, err
	}
	if err := n.h.SetLinkUp("lo"); err != nil {
		return n, err
	}
	if _, _, err := c.h.EnsureVeth(netops.VethOpts{HostName: fmt.Sprintf("bp%s%d", tag, i), PeerName: "eth0", Peer: n.h, Master: underlayBridge}); err != nil {
		return n, err
	}
	if err := n.h.EnsureAddr("eth0", netip.PrefixFrom(nodeIP(i), 16), netops.AddrOpts{NoDAD: true}); err != nil {
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
	log, err := os.Create(filepath.Join(n.dir, "agent.log"))
	if err != nil {
		return err
	}
	n.cmd = exec.Command(bin, args...)
	n.cmd.Stdout, n.cmd.Stderr = log, log
	n.cmd.Env = append(os.Environ(), env...)
	if err := netops.InNetns(n.ns, n.cmd.Start); err != nil {
		log.Close()
		return err
	}
	n.done = make(chan error, 1)
	cmd := n.cmd
	go func() { n.done <- cmd.Wait(); log.Close() }()
	return nil
}

// exited is the agent's exit, if it has ended.
func (n *node) exited() error {
	select {
	case err := <-n.done:
		n.done <- err
		if err == nil {
			err = fmt.Errorf("exit 0")
		}
		return fmt.Errorf("the agent on %s exited (%v):\n%s", nodeName(n.i), err, n.logTail())
	default:
		return nil
	}
}

func (n *node) logTail() string {
	b, _ := os.ReadFile(filepath.Join(n.dir, "agent.log"))
	if len(b) > 2500 {
		b = b[len(b)-2500:]
	}
	return string(b)
}

// rssKiB is the agent's resident set and its peak.
func (n *node) rssKiB() (rss, hwm int) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", n.cmd.Process.Pid))
	if err != nil {
		return 0, 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == "VmRSS:" {
			fmt.Sscan(f[1], &rss)
		}
		if len(f) >= 2 && f[0] == "VmHWM:" {
			fmt.Sscan(f[1], &hwm)
		}
	}
	return rss, hwm
}

// close stops the agent and removes the node's namespaces.
func (n *node) close() {
	if n.cmd != nil && n.cmd.Process != nil {
		n.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-n.done:
		case <-time.After(10 * time.Second):
			n.cmd.Process.Kill()
			<-n.done
		}
	}
	if n.watch != nil {
		n.watch.close()
	}
	if n.h != nil {
		n.h.Close()
	}
	for _, p := range n.pods {
		netops.DeleteNamedNS(p)
	}
	netops.DeleteNamedNS(n.nsName)
}
