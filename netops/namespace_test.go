package netops_test

import (
	"errors"
	"fmt"
	"os"
	"testing"

	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nstest"
)

func TestNamedNS(t *testing.T) {
	nstest.RequireRoot(t)
	name := fmt.Sprintf("cnibox-test-%d", os.Getpid())
	t.Cleanup(func() { _ = netops.DeleteNamedNS(name) })

	path, err := netops.CreateNamedNS(name)
	must(t, err)
	if path != "/run/netns/"+name {
		t.Errorf("path = %q", path)
	}
	if _, err := netops.CreateNamedNS(name); !errors.Is(err, netops.ErrExists) {
		t.Errorf("second CreateNamedNS = %v, want ErrExists", err)
	}
	h, err := netops.Open(path)
	must(t, err)
	links, err := h.Links()
	must(t, err)
	links = ownLinks(links)
	if len(links) != 1 || links[0].Name != "lo" || links[0].Up {
		t.Errorf("links of a new namespace = %+v, want lo, down", links)
	}
	must(t, h.Close())

	must(t, netops.DeleteNamedNS(name))
	must(t, netops.DeleteNamedNS(name))
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("%s still there: %v", path, err)
	}
	for _, bad := range []string{"", "..", "a/b"} {
		if _, err := netops.CreateNamedNS(bad); err == nil {
			t.Errorf("CreateNamedNS(%q) succeeded", bad)
		}
	}
}
