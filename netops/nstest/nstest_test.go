package nstest_test

import (
	"os"
	"runtime"
	"strings"
	"testing"

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
