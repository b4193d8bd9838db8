//go:build !nokube

package main

// kubeHandoff: this build has the Kubernetes client; nothing to hand over.
func kubeHandoff(*flags, []string) error { return nil }
