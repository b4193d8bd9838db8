package nstest

import (
	"errors"
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// TestKernelEnv is set to "1" in the environment of the tests that make
// test-kernel runs in its VM, on a kernel with every module a test uses.
const TestKernelEnv = "CNIBOX_TEST_KERNEL"

// InTestKernel reports whether the test runs inside make test-kernel.
func InTestKernel() bool { return os.Getenv(TestKernelEnv) == "1" }

// KernelLacks reports whether err says the kernel lacks what was asked for:
// an operation it does not support (EOPNOTSUPP, which netops.ErrNotSupported
// wraps) or a protocol or address family it was built without.
func KernelLacks(err error) bool {
	return errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.EPROTONOSUPPORT) || errors.Is(err, unix.EAFNOSUPPORT)
}

// SkipIfKernelLacks ends a test whose step that needs the kernel feature
// named feature returned err, when err says the kernel lacks it: on the
// host the test skips, naming the feature and make test-kernel (which runs
// it on Debian's stock kernel); inside make test-kernel it fails, since that
// kernel has the feature. For nil and every other error it returns and the
// test goes on.
func SkipIfKernelLacks(t testing.TB, feature string, err error) {
	t.Helper()
	if !KernelLacks(err) {
		return
	}
	if InTestKernel() {
		t.Fatalf("the test kernel lacks %s: %v", feature, err)
	}
	t.Skipf("this kernel lacks %s (%v): make test-kernel runs this test on Debian's stock kernel", feature, err)
}
