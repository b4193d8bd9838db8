package main

import (
	"path"
	"strings"
)

// The second pass: after every package has run once on the VM as booted
// (forwarding off, as the kernel starts), the packages of the forwarding
// patterns run again with the VM's own forwarding on and br_netfilter's
// switches on in its initial namespace, as on a Kubernetes node or a Docker
// host. A new network namespace copies IPv4's conf/all from the initial one
// (net.core.devconf_inherit_init_net=0), so a test that counted on its
// namespaces not forwarding, without setting it, fails here: the
// dependency on the machine shows in make test-kernel, while this machine's
// own sysctls stay untouched (the VM's are the VM's). Its packages report as
// DIR@forwarding.

// forwardingPatterns are the packages of the second pass: those whose tests
// forward between namespaces of their own through a node namespace (the
// fabric, bridges, routed veths, host ports), where the node's forwarding
// decides what reaches a pod. Not all of netops and roles: the first pass
// of netops/nft alone takes 3-4 minutes under TCG, and make test-kernel runs
// inside CI's budget. -forwarding-pkgs replaces them ("./netops/...
// ./roles/..." for everything); "none" skips the pass.
var forwardingPatterns = []string{"./netops/nft", "./roles/bridge", "./roles/ptp", "./roles/portmap"}

// forwardingSkips are the tests of a second-pass package that skip the
// second pass, by package: they write and read tables (churn, dumps, full
// syncs, resyncs) and send no packet through the node, so the node's
// forwarding cannot change what they see; they ran in the first pass. In
// netops/nft they were 231 s of the pass's 383 s under TCG (5e231fe's CI).
// A test not named here runs in both passes (TestForwardingSkipsExist keeps
// the names those of tests that exist).
var forwardingSkips = map[string][]string{
	"netops/nft": {
		"TestServicesCheck", "TestServicesApplyIncremental", "TestServicesApplyPartial", "TestServicesResync",
		"TestServicesRead", "TestServicesShards", "TestServicesShardsAdopt", "TestServicesShardsClaims",
		"TestHasMasqUnderChurn", "TestDumpWhileCommitting",
		"TestPolicyFullSyncChunked", "TestPolicyFullSyncMarks", "TestPolicyFullSyncReplacedRule", "TestPolicyFullSyncUnchanged",
		"TestPolicyAcksOverflow", "TestPolicyAcksOverflowChunked", "TestTableSpecsIdempotent",
	},
}

// guestSkip is pkg's -test.skip in the guest: guestSkips', and in the
// second pass forwardingSkips' too ("" for none).
func guestSkip(pkg string, forwarding bool) string {
	var alts []string
	if s := guestSkips[pkg]; s != "" {
		alts = append(alts, s)
	}
	if names := forwardingSkips[pkg]; forwarding && len(names) > 0 {
		alts = append(alts, "^("+strings.Join(names, "|")+")$")
	}
	return strings.Join(alts, "|")
}

// forwardingSuffix marks a package's result of the second pass.
const forwardingSuffix = "@forwarding"

// forwardingPackages are the packages of pkgs (import paths relative to the
// module) that one of patterns ("./DIR" or "./DIR/...") names, in pkgs'
// order.
func forwardingPackages(pkgs, patterns []string) []string {
	var out []string
	for _, p := range pkgs {
		for _, pat := range patterns {
			pat = strings.TrimPrefix(path.Clean(pat), "./")
			if dir, ok := strings.CutSuffix(pat, "/..."); ok {
				if p == dir || strings.HasPrefix(p, dir+"/") {
					out = append(out, p)
					break
				}
			} else if p == pat {
				out = append(out, p)
				break
			}
		}
	}
	return out
}

// forwardingScript is the guest's second pass (part of initScript): the
// VM's forwarding and br_netfilter's switches on, then the packages of
// /t/packages-forwarding. Without br_netfilter (its file absent) the pass
// fails rather than run without it.
const forwardingScript = `
if [ -s /t/packages-forwarding ]; then
	echo "=== second pass: the VM's net.ipv4.ip_forward=1, net.ipv6.conf.all.forwarding=1, br_netfilter's bridge-nf-call-iptables/ip6tables=1"
	echo 1 > /proc/sys/net/ipv4/ip_forward
	echo 1 > /proc/sys/net/ipv6/conf/all/forwarding
	if echo 1 > /proc/sys/net/bridge/bridge-nf-call-iptables && echo 1 > /proc/sys/net/bridge/bridge-nf-call-ip6tables; then
		runpkgs /t/packages-forwarding ` + forwardingSuffix + `
	else
		echo "` + markStatus + ` br_netfilter` + forwardingSuffix + ` 1 0"
	fi
fi
`
