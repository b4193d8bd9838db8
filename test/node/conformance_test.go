//go:build kube

package node

import (
	"cmp"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cnibox/cnibox/test/internal/upstream"
	corev1 "k8s.io/api/core/v1"
)

// The [sig-network] specs the run picks (CNIBOX_CONFORMANCE_FOCUS and
// _SKIP replace them): what a CNI, kube-proxy and CoreDNS decide. The
// skips are what this machine cannot give, each with its reason in
// docs/conformance.md: a cloud load balancer, SSH to the nodes, a second
// address family on a single-stack cluster, feature gates and alpha or
// beta APIs the control plane does not enable, and specs that disrupt the
// control plane or the nodes.
const (
	conformanceFocus = `\[sig-network\] (Networking|HostPort|Services|DNS|EndpointSlice|EndpointSliceMirroring|Conntrack|KubeProxy|Service endpoints latency|Proxy version v1)`
	conformanceSkip  = `\[Feature:|\[Disruptive\]|\[Flaky\]|LoadBalancer|ESIPP|\[Alpha\]|SSH|IPv6|` + noEphemeralStorage + `|` + noInternet
)

// The dual-stack configuration's IPv6 ranges (pods: a /64 per node), and
// what it runs: the [Feature:IPv6DualStack] specs (the one feature the
// skip lets through; RE2 has no lookahead), with the Granular Checks and
// HostPort for the IPv4 side.
const (
	podNetwork6       = "fd00:10:244::/56"
	serviceNetwork6   = "fd00:10:96::/112"
	conformanceFocus6 = `\[sig-network\] (\[Feature:IPv6DualStack\]|Networking Granular Checks|HostPort)`
	conformanceSkip6  = `\[Feature:([^I]|I[^P]|IP[^v])|\[Disruptive\]|\[Flaky\]|LoadBalancer|ESIPP|\[Alpha\]|SSH|` + noEphemeralStorage + `|` + noInternet
)

// noEphemeralStorage is the spec that needs a node to evict a pod for its
// ephemeral storage: the harness's kubelets run without local storage
// capacity isolation (they cannot read this machine's disk statistics),
// so their nodes have no ephemeral-storage to schedule such a pod on.
const noEphemeralStorage = `should be rejected for evicted pods`

// noInternet is the spec that first resolves 8.8.8.8's PTR record through
// the cluster DNS's upstream: the machine has no Internet (and CoreDNS no
// upstream).
const noInternet = `should forward PTR records lookup to upstream nameserver`

// clusterDNS is CoreDNS's Service address (testdata/coredns.yaml): the
// Service range's .10, as kubeadm has it.
const clusterDNS = "10.96.0.10"

// conformanceEnv is node.sh's environment for the run: every default
// controller, kube-proxy on each node, CoreDNS as the kubelets' cluster
// DNS and the pause image of the e2e suite's version as the sandbox.
func conformanceEnv() []string {
	return []string{"CLUSTER_CONTROLLERS=*", "KUBE_PROXY=" + cmp.Or(os.Getenv("CNIBOX_KUBE_PROXY"), "nftables"),
		"CLUSTER_DNS=" + clusterDNS, "SANDBOX_IMAGE=" + pauseImage}
}

// TestKubeConformance is Kubernetes' own e2e suite (its [sig-network]
// specs, conformanceFocus) on three kubelet nodes with kube-proxy and
// CoreDNS, on the network of the configuration $CNIBOX_CONFORMANCE names:
// anchor (flannel's kube-flannel.yml with a real flanneld v0.28.9 and the
// reference plugins v1.9.1), cnibox-vxlan (bin/cnibox.yaml as the README
// applies it) or cnibox-hostgw (the same, Backend.Type host-gw), or the
// Netpol suite's netpol and netpol-anchor (conformance_netpol_test.go). The e2e
// binary, agnhost and CoreDNS come from test/conformance/build.sh
// ($CNIBOX_CONFORMANCE_TOOLS); e2e's JUnit report goes to
// $CNIBOX_CONFORMANCE_REPORT with results.tsv (spec, state) and summary
// (`conformance CONFIG: N passed, M failed, K skipped`). A spec that fails
// fails the test unless testdata/conformance-known.txt names it with its
// cause.
func TestKubeConformance(t *testing.T) {
	config := env(t, "CNIBOX_CONFORMANCE", "the configuration: anchor, cnibox-vxlan or cnibox-hostgw")
	tools := env(t, "CNIBOX_CONFORMANCE_TOOLS", "test/conformance/build.sh's directory")
	report := env(t, "CNIBOX_CONFORMANCE_REPORT", "where the JUnit report goes (bin/conformance/CONFIG)")
	kubeBin := kubeBinaries(t)
	if _, err := os.Stat(filepath.Join(kubeBin, "kube-proxy")); err != nil {
		t.Fatalf("%v: build it with test/kube/control-plane.sh build kube-proxy", err)
	}
	start := time.Now()
	images := writeConformanceImages(t, t.TempDir(), tools)
	opts := clusterOpts{env: conformanceEnv()}
	var manifest, ns, ds string
	base, netpol := netpolBase(config)
	base, svc := servicesBase(base)
	switch base {
	case "anchor":
		data, err := os.ReadFile(flannelManifest)
		if err != nil {
			t.Fatal(err)
		}
		manifest, ns, ds = string(data), flannelNS, flannelDS
		images = append(images, writeFlannelImages(t, t.TempDir())...)
		if opts.plugins, err = upstream.Plugins(); err != nil {
			t.Fatalf("the reference plugins %s: %v", upstream.Version, err)
		}
	case "cnibox-vxlan", "cnibox-hostgw", "dualstack":
		images = append(images, env(t, "CNIBOX_IMAGE_TAR", "make image's archive (bin/cnibox-image.tar)"))
		// applied as the README says, with the one line of net-conf.json
		// an operator changes for host-gw or dual stack
		data, err := os.ReadFile(env(t, "CNIBOX_MANIFEST", "make image's manifest (bin/cnibox.yaml)"))
		if err != nil {
			t.Fatal(err)
		}
		manifest, ns, ds = string(data), "kube-system", "cnibox"
		if config == "services" {
			// no kube-proxy: the agent serves the Services
			manifest = servicesManifest(t, manifest)
			opts.env = append(opts.env, "KUBE_PROXY=")
		}
		switch base {
		case "cnibox-hostgw":
			manifest = withBackend(t, []byte(manifest), "host-gw")
		case "dualstack":
			manifest = withIPv6(t, manifest)
			opts.dualStack = true
			opts.env = append(opts.env, "CLUSTER_CIDR=10.244.0.0/16,"+podNetwork6, "SERVICE_CIDR=10.96.0.0/16,"+serviceNetwork6)
		}
	default:
		t.Fatalf("$CNIBOX_CONFORMANCE=%q: want anchor, cnibox-vxlan, cnibox-hostgw, dualstack, netpol, netpol-anchor, services or services-anchor", config)
	}
	images = append(images, netpolImages(t, config)...)
	t.Logf("images written after %v", time.Since(start).Round(time.Second))
	c := startClusterWith(t, 3, opts)
	c.importImages(images...)
	c.deployNetwork(config, manifest, ns, ds)
	c.startNetpolAnchor(config)
	if config == "services" {
		c.startLB()
	}
	t.Logf("%s: cluster ready after %v", config, time.Since(start).Round(time.Second))
	var res []specResult
	focus, skip := conformanceFocus, conformanceSkip
	if opts.dualStack {
		focus, skip = conformanceFocus6, conformanceSkip6
	}
	if netpol {
		focus, skip = netpolFocus, netpolSkip
	}
	if svc {
		focus, skip = servicesFocus, servicesSkip(config)
	}
	focus = cmp.Or(os.Getenv("CNIBOX_CONFORMANCE_FOCUS"), focus)
	skip = cmp.Or(os.Getenv("CNIBOX_CONFORMANCE_SKIP"), skip)
	step(t, config+": e2e", func() { res = c.runE2E(tools, report, focus, skip) })
	c.judge(config, report, res)
	t.Logf("%s: the conformance run took %v", config, time.Since(start).Round(time.Second))
}

// routePods gives the control plane's namespace (the underlay's router,
// where the API server runs) a route to each node's podCIDR via the node,
// as a control plane node on the cluster network has: the API server
// proxies to pods and Services (`kubectl proxy`, the Proxy specs).
func (c *cluster) routePods() {
	c.t.Helper()
	for _, n := range c.nodes {
		var nd corev1.Node
		if err := json.Unmarshal([]byte(c.must("get", "node", n.name, "-o", "json")), &nd); err != nil {
			c.t.Fatal(err)
		}
		for _, cidr := range nd.Spec.PodCIDRs {
			via := n.ip
			if strings.Contains(cidr, ":") {
				via = nodeIP6(nd)
			}
			if _, err := c.onNode("ip", "route", "replace", cidr, "via", via); err != nil {
				c.t.Fatalf("route %s via %s in the control plane's namespace: %v", cidr, via, err)
			}
		}
	}
}

// nodeIP6 is the node's IPv6 InternalIP.
func nodeIP6(nd corev1.Node) string {
	for _, a := range nd.Status.Addresses {
		if a.Type == corev1.NodeInternalIP && strings.Contains(a.Address, ":") {
			return a.Address
		}
	}
	return ""
}

// withIPv6 is cnibox's manifest with net-conf.json's dual stack
// (EnableIPv6, IPv6Network podNetwork6): the lines an operator adds.
func withIPv6(t *testing.T, manifest string) string {
	t.Helper()
	const line = `"Network": "10.244.0.0/16",`
	if n := strings.Count(manifest, line); n != 1 {
		t.Fatalf("the manifest has %d lines %s, want the one in net-conf.json", n, line)
	}
	return strings.Replace(manifest, line, line+` "EnableIPv6": true, "IPv6Network": "`+podNetwork6+`",`, 1)
}

// runE2E runs the e2e binary in the control plane's namespace (it reaches
// the API server and the nodes as a client outside the cluster does) with
// the run's focus and skip, in $CNIBOX_CONFORMANCE_PROCS (default 3)
// parallel processes under the ginkgo CLI (the specs mostly wait for pods;
// the [Serial] ones run alone at the end), its output in report/e2e.log,
// and returns the specs of its JUnit report that the focus picks.
func (c *cluster) runE2E(tools, report, focus, skip string) []specResult {
	t := c.t
	t.Helper()
	if err := os.RemoveAll(report); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(report, 0o755); err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(filepath.Join(report, "e2e.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	// the suite's own bound, before the test's (the cleanup needs time)
	timeout := max(time.Minute, time.Until(c.deadline)-time.Minute)
	procs := cmp.Or(os.Getenv("CNIBOX_CONFORMANCE_PROCS"), "3")
	args := []string{"-t", strconv.Itoa(c.init), "-n", filepath.Join(tools, "ginkgo"),
		"--procs=" + procs, "--focus=" + focus, "--skip=" + skip, "--no-color", "--timeout=" + timeout.Round(time.Second).String()}
	if n := os.Getenv("CNIBOX_CONFORMANCE_REPEAT"); n != "" {
		// the same specs N more times on the same cluster (a spec that
		// fails now and then: its cause, not a rerun)
		args = append(args, "--repeat="+n)
	}
	cmd := exec.Command("nsenter", append(args, filepath.Join(tools, "e2e-network.test"), "--",
		"--kubeconfig="+c.kubeconfig, "--provider=skeleton", "--kubectl-path="+filepath.Join(c.kubeBin, "kubectl"),
		"--report-dir="+report, "--allowed-not-ready-nodes=0", "--e2e-output-dir="+report,
		// the skeleton provider knows no node count: specs that need two
		// or three nodes would skip themselves
		"--num-nodes="+strconv.Itoa(len(c.nodes)))...)
	cmd.Dir = report
	cmd.Stdout, cmd.Stderr = logf, logf
	t.Logf("%s", strings.Join(cmd.Args, " "))
	if err := cmd.Run(); err != nil {
		t.Logf("e2e: %v (the report says which specs failed)", err)
	}
	res, err := readJUnit(report, focus)
	if err != nil {
		data, _ := os.ReadFile(logf.Name())
		lines := strings.Split(strings.TrimSpace(string(data)), "\n")
		t.Fatalf("%v; e2e.log ends:\n%s", err, strings.Join(lines[max(0, len(lines)-60):], "\n"))
	}
	return res
}

// judge writes results.tsv and the summary line into report, logs the
// counts, and fails the test for each failed spec that
// testdata/conformance-known.txt does not name for config.
func (c *cluster) judge(config, report string, res []specResult) {
	t := c.t
	t.Helper()
	known := knownFailures(t, config)
	var tsv strings.Builder
	count := map[string]int{}
	for _, r := range res {
		fmt.Fprintf(&tsv, "%s\t%s\n", r.name, r.state)
		count[r.state]++
		if r.state != "failed" {
			continue
		}
		if cause, ok := known.match(r.name); ok {
			t.Logf("failed, known (%s): %s", cause, r.name)
			continue
		}
		t.Errorf("failed: %s\n%s", r.name, r.failure)
	}
	summary := fmt.Sprintf("conformance %s: %d passed, %d failed, %d skipped", config, count["passed"], count["failed"], count["skipped"])
	if err := os.WriteFile(filepath.Join(report, "results.tsv"), []byte(tsv.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(report, "summary"), []byte(summary+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Log(summary)
}
