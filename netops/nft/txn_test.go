package nft

import (
	"errors"
	"testing"

	"github.com/google/nftables"
	mdnetlink "github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// TestTxn commits through both builders of a txn, reuses one txn for a
// second transaction (as the masquerade's retry after ENOENT does), and
// checks that a txn with both kinds of changes is refused with nothing sent.
func TestTxn(t *testing.T) {
	t.Parallel()
	onKernels(t, "txn", testTxn)
}

func testTxn(t *testing.T, h *Handle) {
	table := &nftables.Table{Family: nftables.TableFamilyINet, Name: "txn-test"}
	chain := func(name string) *nftables.Chain { return &nftables.Chain{Name: name, Table: table} }
	has := func(name string) bool {
		t.Helper()
		ok, err := h.nftChainExists(unix.NFPROTO_INET, table.Name, name)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}

	tx, err := h.begin()
	if err != nil {
		t.Fatal(err)
	}
	c := tx.conn()
	c.AddTable(table)
	c.AddChain(chain("a"))
	if err := tx.commit(); err != nil {
		t.Fatalf("first commit: %v", err)
	}
	// The builder handed out before the first commit queues the second.
	c.AddChain(chain("b"))
	if err := tx.commit(); err != nil {
		t.Fatalf("second commit: %v", err)
	}
	if !has("a") || !has("b") {
		t.Fatalf("chains a, b after two commits of one txn: %v, %v; want both", has("a"), has("b"))
	}

	// A raw transaction: the set elements' table is wrong, so the kernel
	// rejects the batch and nothing of it stays.
	raw := h.tx()
	raw.add(nftElemMsg("no-such-table", "s", unix.NFT_MSG_NEWSETELEM, mdnetlink.Acknowledge|mdnetlink.Create, []nftElem{{key: []byte{1, 2, 3, 4}}}, false))
	if err := raw.commit(); !errors.Is(err, unix.ENOENT) {
		t.Fatalf("raw commit into a missing table = %v, want ENOENT", err)
	}

	mixed := h.tx()
	mixed.conn().AddChain(chain("c"))
	mixed.add(nftElemMsg(table.Name, "s", unix.NFT_MSG_NEWSETELEM, mdnetlink.Acknowledge|mdnetlink.Create, []nftElem{{key: []byte{1, 2, 3, 4}}}, false))
	if err := mixed.commit(); !errors.Is(err, errMixedTxn) {
		t.Fatalf("commit of a mixed txn = %v, want errMixedTxn", err)
	}
	if has("c") {
		t.Fatal("a refused txn sent its builder's chain")
	}
	// Nor does the next transaction carry it.
	next := h.tx()
	next.conn().AddChain(chain("d"))
	if err := next.commit(); err != nil {
		t.Fatal(err)
	}
	if has("c") || !has("d") {
		t.Fatalf("after the next commit: chain c %v, d %v; want only d", has("c"), has("d"))
	}
}
