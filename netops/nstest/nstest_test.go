package nstest_test

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"

	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nstest"
	"github.com/vishvananda/netns"
)

func TestNewNSAndRun(t *testing.T) {
	nstest.RequireRoot(t)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	before, err := netns.Get()
	if err != nil {
		t.Fatal(err)
	}
	defer before.Close()

	var path string
	t.Run("create", func(t *testing.T) {
		path = nstest.NewNS(t, "nst")
		if !strings.HasPrefix(path, "/run/netns/nst-") {
			t.Errorf("path = %q", path)
		}
		ns, err := netns.GetFromPath(path)
		if err != nil {
			t.Fatal(err)
		}
		defer ns.Close()
		if ns.Equal(before) {
			t.Fatal("the new namespace is the caller's")
		}
		var inside netns.NsHandle
		err = nstest.Run(t, path, func() error {
			var err error
			inside, err = netns.Get()
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		defer inside.Close()
		if !inside.Equal(ns) {
			t.Error("Run did not run inside the namespace")
		}
	})

	now, err := netns.Get()
	if err != nil {
		t.Fatal(err)
	}
	defer now.Close()
	if !now.Equal(before) {
		t.Error("NewNS or Run left the calling thread in another namespace")
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("namespace %s not deleted after the subtest: %v", path, err)
	}
}

// TestNewNSSettled: a namespace NewNS makes forwards nothing, filters no
// reverse path and sends no bridged traffic through IP's hooks, whatever the
// machine's own settings (a new namespace copies IPv4's from the initial
// one; br_netfilter, where loaded, starts on in each namespace). make
// test-kernel's second pass runs this with the VM's forwarding on.
func TestNewNSSettled(t *testing.T) {
	path := nstest.NewNS(t, "nss")
	for _, key := range []string{
		"net/ipv4/ip_forward", "net/ipv4/conf/all/forwarding", "net/ipv4/conf/default/forwarding",
		"net/ipv6/conf/all/forwarding", "net/ipv4/conf/all/rp_filter", "net/ipv4/conf/default/rp_filter",
		"net/bridge/bridge-nf-call-iptables", "net/bridge/bridge-nf-call-ip6tables",
	} {
		var got []byte
		err := nstest.Run(t, path, func() error {
			var err error
			got, err = os.ReadFile("/proc/sys/" + key)
			return err
		})
		if os.IsNotExist(err) {
			continue // no IPv6 or no br_netfilter here: off anyway
		}
		if err != nil {
			t.Fatal(err)
		}
		if v := strings.TrimSpace(string(got)); v != "0" {
			t.Errorf("%s = %s in a new namespace, want 0", key, v)
		}
	}
}

// TestSetBaseSysctls: a pod namespace made as a runtime makes it, which
// forwards (set here, as it would inherit on a machine that forwards),
// forwards no more after SetBaseSysctls, and its loopback stays down for
// the loopback role.
func TestSetBaseSysctls(t *testing.T) {
	nstest.RequireRoot(t)
	name := fmt.Sprintf("nsb-%d", os.Getpid())
	path, err := netops.CreateNamedNS(name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = netops.DeleteNamedNS(name) })
	read := func(key string) string {
		var got []byte
		if err := nstest.Run(t, path, func() error {
			var err error
			got, err = os.ReadFile("/proc/sys/" + key)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(got))
	}
	if err := nstest.Run(t, path, func() error {
		return os.WriteFile("/proc/sys/net/ipv4/conf/all/forwarding", []byte("1"), 0o644)
	}); err != nil {
		t.Fatal(err)
	}
	if v := read("net/ipv4/conf/all/forwarding"); v != "1" {
		t.Fatalf("the test's own setting did not take: forwarding %s", v)
	}
	nstest.SetBaseSysctls(t, path)
	for _, key := range []string{"net/ipv4/ip_forward", "net/ipv4/conf/all/forwarding", "net/ipv4/conf/all/rp_filter"} {
		if v := read(key); v != "0" {
			t.Errorf("%s = %s after SetBaseSysctls, want 0", key, v)
		}
	}
	h, err := netops.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	lo, err := h.LinkByName("lo")
	if err != nil {
		t.Fatal(err)
	}
	if lo.Up {
		t.Error("SetBaseSysctls set the loopback up: the loopback role's job")
	}
}
