package firewalld_test

import (
	"context"
	"errors"
	"net/netip"
	"testing"

	"github.com/cnibox/cnibox/netops/firewalld"
	"github.com/cnibox/cnibox/netops/firewalld/fwdtest"
)

func TestNoBus(t *testing.T) {
	t.Setenv("DBUS_SYSTEM_BUS_ADDRESS", "unix:path="+t.TempDir()+"/none")
	if _, err := firewalld.Connect(context.Background()); !errors.Is(err, firewalld.ErrNotRunning) {
		t.Fatalf("Connect with no bus: %v, want ErrNotRunning", err)
	}
}

// TestSources drives Debian's firewalld: addresses go into a zone and out
// again, both twice, and the errors say what firewalld refused.
func TestSources(t *testing.T) {
	t.Setenv("DBUS_SYSTEM_BUS_ADDRESS", fwdtest.Start(t))
	ctx := context.Background()
	c, err := firewalld.Connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if !c.Running(ctx) {
		t.Fatal("Running: false with firewalld on the bus")
	}
	for _, s := range []string{"10.99.0.5", "fd00:99::5"} {
		a := netip.MustParseAddr(s)
		for i := 0; i < 2; i++ {
			if err := c.AddSource(ctx, "trusted", a); err != nil {
				t.Fatalf("AddSource %s (#%d): %v", a, i+1, err)
			}
		}
		if z, err := c.ZoneOfSource(ctx, a); err != nil || z != "trusted" {
			t.Fatalf("ZoneOfSource %s = %q, %v; want trusted", a, z, err)
		}
		if err := c.AddSource(ctx, "public", a); !errors.Is(err, firewalld.ErrZoneConflict) {
			t.Errorf("AddSource %s to another zone: %v, want ErrZoneConflict", a, err)
		}
		if err := c.RemoveSource(ctx, "public", a); err != nil {
			t.Errorf("RemoveSource %s from a zone it is not in: %v", a, err)
		}
		for i := 0; i < 2; i++ {
			if err := c.RemoveSource(ctx, "trusted", a); err != nil {
				t.Fatalf("RemoveSource %s (#%d): %v", a, i+1, err)
			}
		}
		if z, err := c.ZoneOfSource(ctx, a); err != nil || z != "" {
			t.Fatalf("ZoneOfSource %s after removal = %q, %v; want none", a, z, err)
		}
	}
	if err := c.AddSource(ctx, "no-such-zone", netip.MustParseAddr("10.99.0.6")); !errors.Is(err, firewalld.ErrInvalidZone) {
		t.Errorf("AddSource to a missing zone: %v, want ErrInvalidZone", err)
	}
	if err := c.RemoveSource(ctx, "no-such-zone", netip.MustParseAddr("10.99.0.6")); err != nil {
		t.Errorf("RemoveSource from a missing zone: %v", err)
	}
}
