package main

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"

	"github.com/google/nftables"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// side is one policy agent under test.
type side interface {
	name() string
	tag() string // short, in namespace and link names
	start(c *cluster, n *node) error
	// policyChains counts the chains of NetworkPolicies in the node's
	// kernel; a policy's arrival adds one.
	policyChains(n *node) (int, error)
	// podKnown reports whether the address is in the node's rules; nil
	// when the nftables set element notifications say it.
	podKnown() func(n *node, ip netip.Addr) (bool, error)
}

// cniboxSide is cnibox-agent-kube: the overlay and the policy table; with
// flowLog, every verdict of every connection logged (--flow-log=allow,deny)
// with no rate limit, to flows.log in the node's directory.
type cniboxSide struct {
	bin     string
	flowLog bool
}

func (s cniboxSide) name() string {
	if s.flowLog {
		return "cnibox-agent, flow log on"
	}
	return "cnibox-agent"
}

func (s cniboxSide) tag() string {
	if s.flowLog {
		return "f"
	}
	return "c"
}

func (s cniboxSide) start(c *cluster, n *node) error {
	conf := filepath.Join(n.dir, "net-conf.json")
	if err := os.WriteFile(conf, []byte(`{"Network": "10.0.0.0/8", "SubnetLen": 16, "Backend": {"Type": "vxlan"}}`), 0o644); err != nil {
		return err
	}
	args := []string{"--kube-subnet-mgr", "--kubeconfig-file", c.kc, "--iface", "eth0", "--net-config-path", conf,
		"--subnet-file", filepath.Join(n.dir, "subnet.env"), "--data-dir", filepath.Join(n.dir, "data")}
	if s.flowLog {
		args = append(args, "--flow-log=allow,deny", "--flow-log-rate=-1", "--flow-log-file", flowLogOf(n))
	}
	return n.start(s.bin, []string{"NODE_NAME=" + nodeName(n.i)}, args...)
}

// flowLogOf is the flow log of node n's agent (the flow log side).
func flowLogOf(n *node) string { return filepath.Join(n.dir, "flows.log") }

// policyChains counts the policies in the table, not its chains: a
// NetworkPolicy is up to eight chains n-ID-{in,eg}{4,6}[u] (the u ones
// judge untracked packets), all written in one transaction; counting
// chains would call 200 policies there after 25.
// The notifications say it (nftWatch.countChains) unless an overrun lost
// some: a dump of the table, twice the chains since the untracked twins,
// made while the agents wrote the policy, took their CPU.
func (cniboxSide) policyChains(n *node) (int, error) {
	id := func(name string) string {
		id, _, _ := strings.Cut(strings.TrimPrefix(name, "n-"), "-")
		return id
	}
	if n.watch != nil {
		if k, ok := n.watch.countChains("cnibox-policy", "n-", id); ok {
			return k, nil
		}
	}
	return countChains(n, "cnibox-policy", "n-", id)
}

func (cniboxSide) podKnown() func(*node, netip.Addr) (bool, error) { return nil }

// kubeRouterSide is kube-router's policy controller alone (iptables and
// ipset; no routing, no service proxy).
type kubeRouterSide struct{ bin string }

func (kubeRouterSide) name() string { return "kube-router" }
func (kubeRouterSide) tag() string  { return "k" }

func (s kubeRouterSide) start(c *cluster, n *node) error {
	return n.start(s.bin, nil,
		"--run-firewall=true", "--run-router=false", "--run-service-proxy=false",
		"--kubeconfig="+c.kc, "--hostname-override="+nodeName(n.i), "--health-port=0", "--metrics-port=0", "-v=1")
}

func (kubeRouterSide) policyChains(n *node) (int, error) {
	return countChains(n, "filter", "KUBE-NWPLCY-", nil) // one chain a policy
}

// podKnown: the address is in one of kube-router's ipsets.
func (kubeRouterSide) podKnown() func(*node, netip.Addr) (bool, error) {
	return func(n *node, ip netip.Addr) (bool, error) {
		ns, err := netns.GetFromPath(n.ns)
		if err != nil {
			return false, err
		}
		defer ns.Close()
		h, err := netlink.NewHandleAt(ns)
		if err != nil {
			return false, err
		}
		defer h.Close()
		sets, err := h.IpsetListAll()
		if err != nil {
			return false, fmt.Errorf("ipset list: %w", err)
		}
		for _, s := range sets {
			for _, e := range s.Entries {
				if a, ok := netip.AddrFromSlice(e.IP); ok && a.Unmap() == ip {
					return true, nil
				}
			}
		}
		return false, nil
	}
}

// countChains counts the policies of table: its chains whose name starts
// with prefix, those of one policy (policy: a chain's policy; nil: one
// chain a policy) counted once.
func countChains(n *node, table, prefix string, policy func(chain string) string) (int, error) {
	f, err := os.Open(n.ns)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	conn, err := nftables.New(nftables.WithNetNSFd(int(f.Fd())))
	if err != nil {
		return 0, err
	}
	defer conn.CloseLasting()
	chains, err := conn.ListChains()
	if err != nil {
		return 0, err
	}
	seen := map[string]bool{}
	for _, ch := range chains {
		if ch.Table.Name == table && strings.HasPrefix(ch.Name, prefix) {
			if policy != nil {
				seen[policy(ch.Name)] = true
			} else {
				seen[ch.Name] = true
			}
		}
	}
	return len(seen), nil
}
