package nft

import (
	"bytes"
	"testing"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
)

// TestElemsMessage: the hand-written element list reads back as what was
// written (keys, values, jumps), with the table and set named, and the
// elements google/nftables would have to write itself are left to it.
func TestElemsMessage(t *testing.T) {
	set := &nftables.Set{Name: "slots4-0a1", Table: svcTable()}
	elems := []nftables.SetElement{
		{Key: []byte{1, 2, 3, 4, 0, 0, 0, 7, 0, 0, 0, 3}, Val: []byte{10, 0, 0, 1, 0x1f, 0x90, 0, 0}},
		{Key: []byte{10, 96, 0, 10, 6, 0, 0, 0, 0, 80, 0, 0}, VerdictData: gotoChain("svc-abcdefghijklm")},
		{Key: []byte{10, 96, 0, 11, 17, 0, 0, 0, 0, 53, 0, 0}, VerdictData: &expr.Verdict{Kind: expr.VerdictJump, Chain: "np-17-53"}},
		{Key: []byte{10, 0, 0, 9}}, // (a set's: a key only)
	}
	if !plainElems(elems) {
		t.Fatal("plainElems: false for keys, values and jumps")
	}
	m := elemsMessage(set, elems)
	if m.Data[0] != byte(nftables.TableFamilyINet) {
		t.Errorf("family %d, want inet", m.Data[0])
	}
	name, got, err := parseNftElems(m.Data)
	if err != nil {
		t.Fatal(err)
	}
	if name != set.Name || len(got) != len(elems) {
		t.Fatalf("set %q with %d elements, want %q with %d", name, len(got), set.Name, len(elems))
	}
	for i, e := range elems {
		want := ""
		if e.VerdictData != nil {
			want = e.VerdictData.Chain
		}
		if !bytes.Equal(got[i].key, e.Key) || !bytes.Equal(got[i].data, e.Val) || got[i].jump != want {
			t.Errorf("element %d: key %x data %x chain %q, want %x %x %q", i, got[i].key, got[i].data, got[i].jump, e.Key, e.Val, want)
		}
	}
	if cap(m.Data) != len(m.Data) {
		t.Errorf("message of %d bytes in a buffer of %d: its size was not computed right", len(m.Data), cap(m.Data))
	}
	for _, odd := range []nftables.SetElement{
		{Key: []byte{1}, IntervalEnd: true}, {Key: []byte{1}, Comment: "x"},
		{Key: []byte{1}, VerdictData: &expr.Verdict{Kind: expr.VerdictDrop}},
	} {
		if plainElems([]nftables.SetElement{odd}) {
			t.Errorf("plainElems(%+v): true", odd)
		}
	}
}
