package nstest

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"testing"
)

// baseSysctls are the settings every namespace nstest makes starts with,
// whatever the machine's own are. A new network namespace copies IPv4's
// conf/all and conf/default from the initial namespace
// (net.core.devconf_inherit_init_net=0, the kernel's default), not from the
// namespace that makes it: on a machine that forwards IP (every Kubernetes
// node, every Docker host) a test's "node" would forward too, and one that
// counted on it not forwarding would fail there and pass elsewhere. So
// forwarding and reverse-path filtering are off, and br_netfilter's switches
// (per namespace since Linux 5.3, on by default where the module is loaded)
// are off where the module is loaded: bridged traffic meets no IP hook, as
// on a machine without it. A test that needs one of them on sets it in its
// own namespace (netops' SetSysctls), saying so.
var baseSysctls = []struct{ path, value string }{
	{"/proc/sys/net/ipv4/conf/all/forwarding", "0"},
	{"/proc/sys/net/ipv4/conf/default/forwarding", "0"},
	{"/proc/sys/net/ipv6/conf/all/forwarding", "0"},
	{"/proc/sys/net/ipv6/conf/default/forwarding", "0"},
	{"/proc/sys/net/ipv4/conf/all/rp_filter", "0"},
	{"/proc/sys/net/ipv4/conf/default/rp_filter", "0"},
	{"/proc/sys/net/bridge/bridge-nf-call-iptables", "0"},
	{"/proc/sys/net/bridge/bridge-nf-call-ip6tables", "0"},
	{"/proc/sys/net/bridge/bridge-nf-call-arptables", "0"},
}

// SetBaseSysctls writes baseSysctls in the namespace at path, its loopback
// left as it is: for a pod namespace a test makes with
// netops.CreateNamedNS, as a runtime does (the loopback role brings lo up),
// which would otherwise inherit the machine's IPv4 settings. It fails the
// test on an error.
func SetBaseSysctls(t testing.TB, path string) {
	t.Helper()
	if err := Run(t, path, writeBaseSysctls); err != nil {
		t.Fatalf("settle namespace %s: %v", path, err)
	}
}

// settle sets lo up and writes baseSysctls in the namespace of the calling
// thread. A setting whose file is absent (IPv6 disabled, no br_netfilter)
// is skipped: the kernel then behaves as the setting asks anyway.
func settle() error {
	if err := loUp(); err != nil {
		return err
	}
	return writeBaseSysctls()
}

// writeBaseSysctls writes baseSysctls in the namespace of the calling
// thread; a setting whose file is absent is skipped.
func writeBaseSysctls() error {
	for _, s := range baseSysctls {
		if err := os.WriteFile(s.path, []byte(s.value), 0o644); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("set %s to %s: %w", s.path, s.value, err)
		}
	}
	return nil
}
