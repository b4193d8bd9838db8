package nft

import "testing"

// TestNextGen: generations never take 0 (a new connection's mark) and wrap
// from the last to 1.
func TestNextGen(t *testing.T) {
	t.Parallel()
	if g := nextGen(7); g != 8 {
		t.Errorf("nextGen(7) = %d", g)
	}
	if g := nextGen(policyGenMax); g != 1 {
		t.Errorf("nextGen(max) = %d, want 1", g)
	}
	for range 1000 {
		if g := nextGen(0); g == 0 || g > policyGenMax {
			t.Fatalf("nextGen(0) = %d, outside 1..%d", g, policyGenMax)
		}
	}
	if m := uint32(policyGenMax) << policyGenShift; m&^policyMarkMask != 0 {
		t.Errorf("the last generation's mark %#x leaves cnibox's bits %#x", m, policyMarkMask)
	}
}
