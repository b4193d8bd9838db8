//go:build kube

package node

import (
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

// The Services configurations of TestKubeConformance (issue 63): Kubernetes'
// own Services, Conntrack, KubeProxy and Networking specs with cnibox's
// Services proxy in place of kube-proxy (services: cnibox-vxlan from the
// chart with serviceProxy.enabled, no kube-proxy on any node) and, in the
// same run, the anchor it answers to (services-anchor: cnibox-vxlan with
// kube-proxy v1.34.2 in nftables mode, as the other configurations run).
// On services the chart's LoadBalancer IPAM and announcements are on
// with a pool of the LAN (conformance_lb_test.go), and Kubernetes' own
// LoadBalancers specs run too (servicesSkip); services-anchor has no
// LoadBalancer controller and skips them, as the other configurations do
// (conformanceSkip).
const servicesFocus = `\[sig-network\] (Services|LoadBalancers|Conntrack|KubeProxy|Networking|Service endpoints latency|EndpointSlice)`

// lbCannot are the LoadBalancers specs that cannot pass with one node
// announcing each address on the LAN (ARP), whoever implements it
// (MetalLB's L2 mode as cnibox's); docs/conformance.md says why each:
// traffic to an address with externalTrafficPolicy Local reaching the
// endpoints of more than one node (a cloud's load balancer spreads it
// over every node whose health check passes), and the cloud service
// controller's finalizer service.kubernetes.io/load-balancer-cleanup,
// which cnibox's IPAM does not add (a Service could not be deleted while
// no agent runs --lb-ipam).
const lbCannot = `should target all nodes with endpoints|` +
	`should be able to switch session affinity for LoadBalancer service with Local traffic policy|` +
	`should handle load balancer cleanup finalizer for service`

// servicesSkip is the skip of a Services configuration: services lets the
// [Feature:LoadBalancer] specs through (RE2 has no lookahead) but for
// lbCannot; services-anchor skips them with conformanceSkip.
func servicesSkip(config string) string {
	if config != "services" {
		return conformanceSkip
	}
	return `\[Feature:([^L]|L[^o])|\[Disruptive\]|\[Flaky\]|\[Alpha\]|SSH|IPv6|` + noEphemeralStorage + `|` + noInternet + `|` + lbCannot
}

// servicesBase is the network configuration a Services configuration runs
// on, and whether config is one.
func servicesBase(config string) (string, bool) {
	switch config {
	case "services", "services-anchor":
		return "cnibox-vxlan", true
	}
	return config, false
}

// servicesManifest is cnibox's chart rendered as an operator who runs
// without kube-proxy installs it: serviceProxy.enabled, and the API
// server's own address for the agent (the kubernetes Service is the
// agent's to serve, so the agent cannot reach the API server through it),
// the image of manifest (make image's bin/cnibox.yaml), with a real helm
// (CNIBOX_HELM); with the LoadBalancer IPAM and announcements on and,
// before it, the LoadBalancerIPPool CRD (helm install's crds/).
func servicesManifest(t *testing.T, manifest string) string {
	t.Helper()
	m := regexp.MustCompile(`(?m)^\s+image: (\S+)$`).FindStringSubmatch(manifest)
	if m == nil {
		t.Fatal("the manifest names no image")
	}
	bin := env(t, "CNIBOX_HELM", "helm v3 (deploy/helm/helm.sh)")
	args := append([]string{"template", "cnibox", chartDir, "--namespace", "kube-system",
		"--set", "serviceProxy.enabled=true", "--set", "apiServer.host=" + clusterUplink, "--set", "apiServer.port=443",
		"--set", "loadBalancerIPAM.enabled=true", "--set", "loadBalancerAnnounce.enabled=true"},
		imageValues(strings.Trim(m[1], `"`))...)
	out, err := exec.Command(bin, args...).Output()
	if err != nil {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, stderr)
	}
	crd, err := lbCRD()
	if err != nil {
		t.Fatal(err)
	}
	return crd + "\n---\n" + string(out)
}
