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
// The skips are conformanceSkip's.
const servicesFocus = `\[sig-network\] (Services|Conntrack|KubeProxy|Networking|Service endpoints latency|EndpointSlice)`

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
// (CNIBOX_HELM).
func servicesManifest(t *testing.T, manifest string) string {
	t.Helper()
	m := regexp.MustCompile(`(?m)^\s+image: (\S+)$`).FindStringSubmatch(manifest)
	if m == nil {
		t.Fatal("the manifest names no image")
	}
	bin := env(t, "CNIBOX_HELM", "helm v3 (deploy/helm/helm.sh)")
	args := append([]string{"template", "cnibox", chartDir, "--namespace", "kube-system",
		"--set", "serviceProxy.enabled=true", "--set", "apiServer.host=" + clusterUplink, "--set", "apiServer.port=443"},
		imageValues(strings.Trim(m[1], `"`))...)
	out, err := exec.Command(bin, args...).Output()
	if err != nil {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, stderr)
	}
	return string(out)
}
