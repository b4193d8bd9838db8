//go:build nokube

package main

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// kubeBinary is the full build (client-go linked) that this lean build hands
// the Kubernetes features over to; `make build` puts it next to cnibox-agent.
const kubeBinary = "cnibox-agent-kube"

// kubeHandoff: this build (tag nokube) carries only the etcd backend, so
// that an etcd node's agent does not pay client-go's size (its pages are
// most of the agent's resident set: 26.0 -> 20.0 MB of binary). With
// --kube-subnet-mgr or the pod API it replaces itself (exec, same PID and
// arguments) with cnibox-agent-kube from its own directory, so unit files
// that name cnibox-agent keep working. It returns only on failure; nil
// when nothing needs Kubernetes.
func kubeHandoff(f *flags, args []string) error {
	if !f.kubeSubnetMgr && !f.pod.enabled() && !f.ipam.needsKube() && !f.svc.proxy && !f.lb.on {
		return nil
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("--kube-subnet-mgr/--pod-api need %s: %w", kubeBinary, err)
	}
	full := filepath.Join(filepath.Dir(self), kubeBinary)
	if filepath.Base(self) == kubeBinary {
		return fmt.Errorf("%s is built without the Kubernetes client (tag nokube): rebuild it without the tag", full)
	}
	err = syscall.Exec(full, append([]string{full}, args...), os.Environ())
	return fmt.Errorf("--kube-subnet-mgr/--pod-api: this cnibox-agent carries only the etcd backend and hands over to %s: %w (install it next to cnibox-agent: make build puts both in bin/)", full, err)
}
