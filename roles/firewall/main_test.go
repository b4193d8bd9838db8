package firewall_test

import (
	"os"
	"testing"

	"github.com/cnibox/cnibox/netops/nstest"
)

// TestMain runs the package's tests in a private network namespace that
// stands for the node. The system bus is one that does not exist, so that
// a firewalld of the machine is never found (backend left out would use
// it); TestFirewalld points it at its own.
func TestMain(m *testing.M) {
	os.Setenv("DBUS_SYSTEM_BUS_ADDRESS", "unix:path=/nonexistent/cnibox-test-no-system-bus")
	nstest.MainInPrivateNetns(m)
}
