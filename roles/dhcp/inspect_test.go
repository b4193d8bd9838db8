package dhcp

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/roles/dhcp/lease"
	"github.com/cnibox/cnibox/store"
)

// reports collects what a hook reports (cniplug.Reporter).
type reports struct{ fails, passes []string }

func (r *reports) Pass(check, format string, args ...any) {
	r.passes = append(r.passes, check+": "+fmt.Sprintf(format, args...))
}
func (r *reports) Fail(check, fix, format string, args ...any) {
	r.fails = append(r.fails, check+": "+fmt.Sprintf(format, args...))
}
func (r *reports) Warn(check, fix, format string, args ...any) {}

// TestInspectLeases: `cnibox inspect dhcp` (the role's inspect command)
// lists the leases of the store with server, state, renewal and expiry,
// and an empty list without a store; doctor's node check (the role's
// DoctorNode) fails for an expired lease and a lease past its expiry, and
// passes otherwise.
func TestInspectLeases(t *testing.T) {
	now := time.Now()
	leases := []lease.Lease{
		{Network: "lan", ContainerID: "c1", IfName: "eth0", Pod: "default/a", Address: "10.56.0.5/24", Server: "10.56.0.1", State: lease.Bound, Renewed: now, Expires: now.Add(time.Minute)},
		{Network: "lan", ContainerID: "c2", IfName: "eth0", Address: "10.56.0.6/24", Server: "10.56.0.1", State: lease.Expired, Renewed: now.Add(-3 * time.Minute), Expires: now.Add(-time.Minute)},
	}
	if len(known.Inspect) != 1 || known.Inspect[0].Name != "dhcp" || known.DoctorNode == nil {
		t.Fatalf("the role declares %+v, want `inspect dhcp` and a node check", known.Inspect)
	}
	ic := known.Inspect[0]
	if v, err := ic.List(nil, ""); err != nil || v == nil || len(v.([]lease.Lease)) != 0 {
		t.Errorf("List without a store = %#v, %v; want an empty list", v, err)
	}
	st, err := store.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for _, l := range leases {
		if err := lease.Records.In(st).Put(l); err != nil {
			t.Fatal(err)
		}
	}
	v, err := ic.List(st, "lan")
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := ic.Print(&b, v); err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"SERVER", "LAST RENEWAL", "10.56.0.5/24", "10.56.0.6/24", "10.56.0.1", "expired", "default/a"} {
		if !strings.Contains(b.String(), w) {
			t.Errorf("table lacks %q:\n%s", w, b.String())
		}
	}
	if v, _ := ic.List(st, "other"); len(v.([]lease.Lease)) != 0 {
		t.Errorf("List(other) = %v, want none", v)
	}

	var r reports
	known.DoctorNode(&cniplug.NodeCheck{Reporter: &r, Store: st})
	if len(r.fails) != 1 || !strings.Contains(r.fails[0], "10.56.0.6/24") || len(r.passes) != 0 {
		t.Errorf("doctor: fails %q passes %q, want one failure for 10.56.0.6/24", r.fails, r.passes)
	}
	if err := lease.Records.In(st).Delete("lan", "c2", "eth0"); err != nil {
		t.Fatal(err)
	}
	r = reports{}
	known.DoctorNode(&cniplug.NodeCheck{Reporter: &r, Store: st})
	if len(r.fails) != 0 || len(r.passes) != 1 {
		t.Errorf("doctor with a current lease: fails %q passes %q, want one pass", r.fails, r.passes)
	}
}
