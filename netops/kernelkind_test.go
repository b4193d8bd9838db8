package netops

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestKindErr: EOPNOTSUPP from creating a link of a known kind becomes the
// one form naming the feature, its option and its module, wrapping
// ErrNotSupported and the kernel's error; other errors are classified as
// before, and every kind a role creates is known.
func TestKindErr(t *testing.T) {
	for _, kind := range []string{"vlan", "dummy", "ipvlan", "macvlan", "vrf", "vxlan", "ifb", "veth", "bridge", "tun"} {
		f, ok := LinkKindFeature(kind)
		if !ok || f.Name == "" || !strings.HasPrefix(f.Config, "CONFIG_") || f.Module == "" {
			t.Errorf("LinkKindFeature(%q) = %+v, %v", kind, f, ok)
		}
	}
	err := kindErr("ipvlan", fmt.Errorf("%w: Unknown device type", unix.EOPNOTSUPP))
	want := "the node's kernel has no ipvlan devices (CONFIG_IPVLAN, module ipvlan): operation not supported: Unknown device type"
	if err.Error() != want || !errors.Is(err, ErrNotSupported) || !errors.Is(err, unix.EOPNOTSUPP) {
		t.Errorf("kindErr = %v; want %q wrapping ErrNotSupported and EOPNOTSUPP", err, want)
	}
	if err := kindErr("vlan", unix.EEXIST); !errors.Is(err, ErrExists) || strings.Contains(err.Error(), "kernel has no") {
		t.Errorf("kindErr(EEXIST) = %v, want ErrExists as before", err)
	}
	if err := kindErr("nosuchkind", unix.EOPNOTSUPP); !errors.Is(err, ErrNotSupported) || strings.Contains(err.Error(), "kernel has no") {
		t.Errorf("kindErr of an unknown kind = %v, want ErrNotSupported unnamed", err)
	}
}
