// Package rbac tests the manifests' RBAC and admission policy on a real
// control plane (test/kube/control-plane.sh, -tags kube): what the agents'
// service accounts may and may not do (kubectl auth can-i --as), and what
// the ValidatingAdmissionPolicy lets a token bound to an agent pod write.
// Run with `flock /tmp/cnibox-kube.lock go test -tags kube ./test/rbac/`.
package rbac
