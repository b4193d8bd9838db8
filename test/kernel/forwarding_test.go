package main

import (
	"os"
	"path/filepath"
	"regexp"
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

// TestForwardingSkipsExist: every test the second pass skips is a test of
// its package (a renamed one would run in both passes, and its old name
// would say nothing); the skip joins the guest's own.
func TestForwardingSkipsExist(t *testing.T) {
	for pkg, names := range forwardingSkips {
		files, err := filepath.Glob(filepath.Join("..", "..", pkg, "*_test.go"))
		if err != nil || len(files) == 0 {
			t.Fatalf("%s: no test files (%v)", pkg, err)
		}
		var src strings.Builder
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			src.Write(b)
		}
		for _, n := range names {
			if !strings.Contains(src.String(), "\nfunc "+n+"(t *testing.T)") {
				t.Errorf("%s: the second pass skips %s, which is not a test there", pkg, n)
			}
		}
		re := regexp.MustCompile(guestSkip(pkg, true))
		if !re.MatchString(names[0]) || re.MatchString(names[0]+"X") || guestSkip(pkg, false) != guestSkips[pkg] {
			t.Errorf("%s: skip %q does not name exactly its tests", pkg, guestSkip(pkg, true))
		}
	}
	if got, want := guestSkip("test/e2e", true), guestSkips["test/e2e"]; got != want {
		t.Errorf("test/e2e's skip in the second pass: %q, want its own %q", got, want)
	}
}
