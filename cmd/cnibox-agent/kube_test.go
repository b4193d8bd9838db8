//go:build !nokube

package main

import (
	"io"
	"testing"
)

// TestClusterPodReaders: the manifests' agents. cnibox.yaml's (the overlay,
// NetworkPolicy on by default, egress beside it) and one with
// MultiNetworkPolicy read every pod for their life, so the pod API shares
// that informer; cnibox-multus.yaml's (the pod API and the cluster IPAM,
// nothing else) reads its node's pods alone.
func TestClusterPodReaders(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want bool
	}{
		{[]string{"--kube-subnet-mgr", "--pod-api", "--cluster-ipam", "--ip-masq"}, true}, // cnibox.yaml
		{[]string{"--pod-api", "--multi-network-policies"}, true},
		{[]string{"--pod-api-only", "--cluster-ipam", "--nad-trusted-namespaces=kube-system", "--multus-conf-dir=/x"}, false}, // cnibox-multus.yaml
		{[]string{"--pod-api"}, false},
	} {
		f, err := parseFlagsEnv(tc.args, io.Discard, noEnv)
		if err != nil {
			t.Errorf("%q: %v", tc.args, err)
			continue
		}
		if got := clusterPodReaders(f); got != tc.want {
			t.Errorf("%q: clusterPodReaders = %v, want %v", tc.args, got, tc.want)
		}
	}
}
