package store

import (
	"strings"
	"testing"
	"time"
)

// TestNodeViews: the agent's views of the node (egress, load balancers)
// read back as written, stamped with the time of the write; one without
// the node's name is refused, naming what it lacks; none written reads as
// not found.
func TestNodeViews(t *testing.T) {
	s := openT(t, t.TempDir())
	if _, found, err := s.Egress(); err != nil || found {
		t.Fatalf("Egress of an empty store: found %v, %v", found, err)
	}
	before := time.Now()
	if err := s.PutLB(LBState{Node: "n1", Uplink: "eth0", Takeovers: 3, Pools: []LBPool{{Name: "p", Used: 1}}}); err != nil {
		t.Fatal(err)
	}
	lb, found, err := s.LB()
	if err != nil || !found {
		t.Fatalf("LB: found %v, %v", found, err)
	}
	if lb.Node != "n1" || lb.Uplink != "eth0" || lb.Takeovers != 3 || len(lb.Pools) != 1 || lb.Pools[0].Name != "p" {
		t.Errorf("LB = %+v", lb)
	}
	if lb.Updated.Before(before.Truncate(time.Second)) {
		t.Errorf("LB's Updated %v, written after %v", lb.Updated, before)
	}
	err = s.PutEgress(EgressState{Uplink: "eth0"})
	if err == nil || !strings.Contains(err.Error(), "egress state needs the node's name") {
		t.Errorf("PutEgress without a node: %v", err)
	}
	if _, found, _ := s.Egress(); found {
		t.Error("the refused egress state was recorded")
	}
}
