package cli

import "os"

// The namespace doctor runs in. Its node checks (the bridges, forwarding,
// the host ends of the veths, the tables) read the network namespace of
// the process: run in a container without hostNetwork, or under `ip netns
// exec`, they read another namespace than the node's, and each would send
// the user to change the machine (a sysctl, a bridge) for what is only
// where doctor looked. So it says first where it runs.

// The namespace files doctor compares: its own and, unless --node-netns
// names another, PID 1's (the node's init, when doctor sees the node's
// processes: on the node, or with hostPID). A harness whose own namespace
// stands for the node (the e2e tests) names its own.
const (
	selfNetNS = "/proc/self/ns/net"
	initNetNS = "/proc/1/ns/net"
)

// checkNodeNS fails doctor's "namespace" check when the namespace at self
// is not the one at init, and notes it for the node checks' fixes; when
// it cannot tell (a normal user cannot read PID 1's), it says nothing.
func (d *doctor) checkNodeNS(self, init string) {
	s, err1 := os.Stat(self)
	i, err2 := os.Stat(init)
	if err1 != nil || err2 != nil || os.SameFile(s, i) {
		return
	}
	d.outsideNodeNS = true
	link, _ := os.Readlink(self)
	d.fail("namespace", "run doctor in the node's network namespace: nsenter --target 1 --net cnibox doctor, or in a pod with hostNetwork: true",
		"doctor runs in network namespace %s, not the node's (%s): the bridge, forwarding and veth checks below read this namespace, not the node's", orDash(link), nodeNSName(init))
}

// nodeFix is fix, or, when doctor runs outside the node's namespace, the
// pointer to the namespace check (what it read there says nothing of the
// node).
func (d *doctor) nodeFix(fix string) string {
	if d.outsideNodeNS {
		return "doctor reads another namespace than the node's: see the namespace check first"
	}
	return fix
}

// nodeNSName says which namespace stands for the node's: PID 1's, or the
// file --node-netns named.
func nodeNSName(path string) string {
	if path == initNetNS {
		return "PID 1's"
	}
	return path
}
