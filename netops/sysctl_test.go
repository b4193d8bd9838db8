package netops_test

import (
	"errors"
	"testing"

	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nstest"
)

func TestSysctl(t *testing.T) {
	nstest.RequireRoot(t)
	machine, err := netops.Open("")
	must(t, err)
	defer machine.Close()
	// Only read the machine's own values, to check they do not change.
	before, err := machine.Sysctl("net.ipv4.ip_forward")
	must(t, err)
	beforeLo, err := machine.Sysctl("net/ipv6/conf/lo/disable_ipv6")
	must(t, err)

	h := openNS(t, "sc")
	flip := map[string]string{"0": "1", "1": "0"}
	tests := []struct {
		key, value string
	}{
		{"net.ipv4.ip_forward", flip[before]},
		{"net/ipv6/conf/lo/disable_ipv6", flip[beforeLo]},
		{"/proc/sys/net/ipv4/conf/all/rp_filter", "2"},
	}
	for _, tt := range tests {
		t.Run(tt.key, func(t *testing.T) {
			must(t, h.SetSysctl(tt.key, tt.value))
			must(t, h.SetSysctl(tt.key, tt.value))
			got, err := h.Sysctl(tt.key)
			must(t, err)
			if got != tt.value {
				t.Errorf("Sysctl(%s) = %q, want %q", tt.key, got, tt.value)
			}
		})
	}

	t.Run("batch", func(t *testing.T) {
		must(t, h.SetSysctls(
			netops.SysctlSetting{Key: "net.ipv4.ip_forward", Value: before},
			netops.SysctlSetting{Key: "net.ipv4.conf.all.rp_filter", Value: "1"},
		))
		for key, want := range map[string]string{"net.ipv4.ip_forward": before, "net.ipv4.conf.all.rp_filter": "1"} {
			if got, err := h.Sysctl(key); err != nil || got != want {
				t.Errorf("Sysctl(%s) = %q, %v; want %q", key, got, err, want)
			}
		}
	})

	t.Run("errors", func(t *testing.T) {
		if _, err := h.Sysctl("net.ipv4.no_such_knob"); !errors.Is(err, netops.ErrNotFound) {
			t.Errorf("Sysctl(missing) = %v, want ErrNotFound", err)
		}
		if err := h.SetSysctl("net/ipv4/conf/nope0/forwarding", "1"); !errors.Is(err, netops.ErrNotFound) {
			t.Errorf("SetSysctl(missing) = %v, want ErrNotFound", err)
		}
		for _, key := range []string{"", "net/../../etc/passwd", "net//ipv4"} {
			if err := h.SetSysctl(key, "1"); err == nil {
				t.Errorf("SetSysctl(%q) succeeded", key)
			}
		}
	})

	after, err := machine.Sysctl("net.ipv4.ip_forward")
	must(t, err)
	afterLo, err := machine.Sysctl("net/ipv6/conf/lo/disable_ipv6")
	must(t, err)
	if after != before || afterLo != beforeLo {
		t.Errorf("the machine's sysctls changed: ip_forward %s -> %s, lo disable_ipv6 %s -> %s", before, after, beforeLo, afterLo)
	}
}

// TestSysctlAt: SetSysctlsAt writes through another path to procfs's sys
// directory (the chart's /host/proc/sys), and its net entries are the
// Handle's namespace's, not the machine's.
func TestSysctlAt(t *testing.T) {
	nstest.RequireRoot(t)
	machine, err := netops.Open("")
	must(t, err)
	defer machine.Close()
	before, err := machine.Sysctl("net.ipv4.ip_forward")
	must(t, err)
	h := openNS(t, "sca")
	want := map[string]string{"0": "1", "1": "0"}[before]
	must(t, h.SetSysctlsAt("/proc/self/root/proc/sys/", netops.SysctlSetting{Key: "net.ipv4.ip_forward", Value: want}))
	if got, err := h.Sysctl("net.ipv4.ip_forward"); err != nil || got != want {
		t.Errorf("the namespace's ip_forward after SetSysctlsAt = %q, %v; want %q", got, err, want)
	}
	if got, _ := machine.Sysctl("net.ipv4.ip_forward"); got != before {
		t.Errorf("the machine's ip_forward changed to %q", got)
	}
	if err := h.SetSysctlsAt(t.TempDir(), netops.SysctlSetting{Key: "net.ipv4.ip_forward", Value: want}); err == nil {
		t.Error("SetSysctlsAt through a directory that is not procfs's: no error")
	}
}
