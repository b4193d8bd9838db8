package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestEtcdBuildWithoutKubernetes keeps the Kubernetes client out of the
// etcd-only agent (make build's cnibox-agent, tag nokube): its pages are
// most of an agent's resident set (24.7 -> 20.0 MB of binary, RSS 25.7 ->
// 21.6 MiB at N=100), and an etcd node has no use for them; the
// Kubernetes features hand over to cnibox-agent-kube (handoff_nokube.go).
func TestEtcdBuildWithoutKubernetes(t *testing.T) {
	out, err := exec.Command("go", "list", "-tags", "nokube", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		if strings.HasPrefix(dep, "k8s.io/") || strings.HasPrefix(dep, "sigs.k8s.io/") {
			t.Errorf("cnibox-agent -tags nokube links %s: keep Kubernetes code in files tagged !nokube", dep)
		}
	}
}
