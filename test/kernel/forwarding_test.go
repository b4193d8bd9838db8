package main

import (
	"slices"
	"strings"
	"testing"
)

func TestForwardingPackages(t *testing.T) {
	pkgs := []string{"", "netops", "netops/nft", "netopsx", "roles/bridge", "agent/policy", "test/e2e"}
	for _, tt := range []struct {
		patterns []string
		want     []string
	}{
		{forwardingPatterns, []string{"netops/nft", "roles/bridge"}},
		{[]string{"./netops"}, []string{"netops"}},
		{[]string{"./test/e2e", "./agent/..."}, []string{"agent/policy", "test/e2e"}},
		{nil, nil},
	} {
		if got := forwardingPackages(pkgs, tt.patterns); !slices.Equal(got, tt.want) {
			t.Errorf("forwardingPackages(%v) = %v, want %v", tt.patterns, got, tt.want)
		}
	}
}

// TestInitScriptSecondPass: the guest turns forwarding and br_netfilter on
// after the first pass and before the second.
func TestInitScriptSecondPass(t *testing.T) {
	first := strings.Index(initScript, "runpkgs /t/packages\n")
	fwd := strings.Index(initScript, "echo 1 > /proc/sys/net/ipv4/ip_forward")
	second := strings.Index(initScript, "runpkgs /t/packages-forwarding")
	if first < 0 || fwd < first || second < fwd || !strings.Contains(initScript, "bridge-nf-call-iptables") {
		t.Errorf("the second pass is not after the first with forwarding on: %d %d %d", first, fwd, second)
	}
}
