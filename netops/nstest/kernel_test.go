package nstest

import (
	"fmt"
	"testing"

	"golang.org/x/sys/unix"
)

func TestKernelLacks(t *testing.T) {
	for _, tt := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{unix.EINVAL, false},
		{fmt.Errorf("create vlan: %w", unix.EOPNOTSUPP), true},
		{unix.EPROTONOSUPPORT, true},
		{unix.EAFNOSUPPORT, true},
	} {
		if got := KernelLacks(tt.err); got != tt.want {
			t.Errorf("KernelLacks(%v) = %v, want %v", tt.err, got, tt.want)
		}
	}
}
