package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/google/nftables"

	"github.com/cnibox/cnibox/netops/nft"
)

// proxy is one Service proxy under test, run in a node namespace of its
// own against the test API server. Another proxy plugs in by this
// interface: what it is called, whether it can run here, the map its
// ClusterIPs land in and how to start it.
type proxy interface {
	name() string
	tag() string // short, in namespace and link names
	anchor() bool
	// unavailable says why the proxy cannot run here ("" if it can).
	unavailable() string
	target() mapRef
	start(c *cluster, n *node) error
}

// kubeProxy is the anchor: kube-proxy v1.34.2 in nftables mode (it execs
// nft), its conntrack settings left alone (they are the machine's, or
// 0 leaves them), its metrics and healthz on the node namespace's
// loopback. Its ClusterIPs are elements of the ip table kube-proxy's
// verdict map service-ips.
type kubeProxy struct {
	bin   string
	extra []string // more flags (-kube-proxy-args)
}

func (kubeProxy) name() string { return "kube-proxy v1.34.2 (nftables)" }
func (kubeProxy) tag() string  { return "k" }
func (kubeProxy) anchor() bool { return true }

func (p kubeProxy) unavailable() string {
	if p.bin == "" {
		return "no kube-proxy binary (-kube-proxy; bash test/kube/control-plane.sh build kube-proxy)"
	}
	if _, err := os.Stat(p.bin); err != nil {
		return fmt.Sprintf("%v (bash test/kube/control-plane.sh build kube-proxy)", err)
	}
	if _, err := exec.LookPath("nft"); err != nil {
		return "its nftables mode execs nft, which is not installed (apt-get install nftables)"
	}
	return ""
}

func (kubeProxy) target() mapRef {
	return mapRef{family: nftables.TableFamilyIPv4, table: "kube-proxy", set: "service-ips"}
}

func (p kubeProxy) start(c *cluster, n *node) error {
	return n.start(p.bin, nil, append([]string{
		"--kubeconfig=" + c.kc, "--hostname-override=" + nodeName, "--proxy-mode=nftables",
		"--cluster-cidr=" + clusterCIDR, "--conntrack-max-per-core=0", "--conntrack-min=0",
		"--conntrack-tcp-timeout-established=0", "--conntrack-tcp-timeout-close-wait=0",
		"--conntrack-udp-timeout=0", "--conntrack-udp-timeout-stream=0",
		"--metrics-bind-address=127.0.0.1:10249", "--healthz-bind-address=127.0.0.1:10256"}, p.extra...)...)
}

// serviceProxyFlag is the agent's switch of the Services proxy.
const serviceProxyFlag = "service-proxy"

// cniboxProxy is cnibox-agent-kube with the Services proxy on
// (--service-proxy), the overlay on the Kubernetes subnet manager as a
// node runs it. Its ClusterIPs are elements of the verdict map
// service-ips4 (issue 63's fixed names) of its shard tables
// cnibox-services-00.. (each Service's in one).
type cniboxProxy struct {
	bin   string
	extra []string // more flags (-agent-args)
}

func (cniboxProxy) name() string { return "cnibox-agent --service-proxy" }
func (cniboxProxy) tag() string  { return "c" }
func (cniboxProxy) anchor() bool { return false }

// unavailable: the binary must exist and list --service-proxy in its
// usage (an agent built before the proxy has no such flag).
func (p cniboxProxy) unavailable() string {
	if _, err := os.Stat(p.bin); err != nil {
		return fmt.Sprintf("%v (make build)", err)
	}
	out, _ := exec.Command(p.bin, "--help").CombinedOutput()
	if !hasFlag(string(out), serviceProxyFlag) {
		return fmt.Sprintf("%s has no --%s (the proxy is not in this build)", filepath.Base(p.bin), serviceProxyFlag)
	}
	return ""
}

// hasFlag reports whether a Go flag package usage text lists -name.
func hasFlag(usage, name string) bool {
	for _, line := range strings.Split(usage, "\n") {
		f := strings.Fields(line)
		if len(f) > 0 && strings.TrimLeft(f[0], "-") == name {
			return true
		}
	}
	return false
}

func (cniboxProxy) target() mapRef {
	shards := nft.ServicesTables()[1:]
	return mapRef{family: nftables.TableFamilyINet, table: shards[0], more: shards[1:], set: nft.ServiceIPs4}
}

func (p cniboxProxy) start(c *cluster, n *node) error {
	conf := filepath.Join(n.dir, "net-conf.json")
	if err := os.WriteFile(conf, []byte(fmt.Sprintf(`{"Network": %q, "SubnetLen": 24, "Backend": {"Type": "vxlan"}}`, clusterCIDR)), 0o644); err != nil {
		return err
	}
	args := []string{"--kube-subnet-mgr", "--kubeconfig-file", c.kc, "--iface", "eth0", "--net-config-path", conf,
		"--subnet-file", filepath.Join(n.dir, "subnet.env"), "--data-dir", filepath.Join(n.dir, "data"),
		"--" + serviceProxyFlag}
	// The pods' network, as kube-proxy is given it (--cluster-cidr), if
	// the agent takes it.
	usage, _ := exec.Command(p.bin, "--help").CombinedOutput()
	if hasFlag(string(usage), "cluster-cidr") {
		args = append(args, "--cluster-cidr="+clusterCIDR)
	}
	return n.start(p.bin, []string{"NODE_NAME=" + nodeName}, append(args, p.extra...)...)
}
