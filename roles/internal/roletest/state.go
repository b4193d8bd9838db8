package roletest

import (
	"testing"

	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/store"
)

// Look returns what f finds in the node's store, open for the call; an
// error fails the test.
func Look[T any](n *Node, f func(*store.Store) (T, error)) T {
	n.T.Helper()
	st, err := store.Open(n.Dir)
	if err != nil {
		n.T.Fatal(err)
	}
	defer st.Close()
	v, err := f(st)
	if err != nil {
		n.T.Fatal(err)
	}
	return v
}

// Store is Look for f that only changes the store or looks through a
// callback.
func (n *Node) Store(f func(*store.Store) error) {
	n.T.Helper()
	Look(n, func(st *store.Store) (struct{}, error) { return struct{}{}, f(st) })
}

// InNS returns what f finds through a handle of namespace ns ("" = the
// node); an error fails the test.
func InNS[T any](t testing.TB, ns string, f func(*netops.Handle) (T, error)) T {
	t.Helper()
	h, err := netops.Open(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	v, err := f(h)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// Endpoints returns the endpoint records of network.
func (n *Node) Endpoints(network string) []store.Endpoint {
	n.T.Helper()
	return Look(n, func(st *store.Store) ([]store.Endpoint, error) { return st.Endpoints(network) })
}

// Reservations returns the IPAM reservations of network.
func (n *Node) Reservations(network string) (all []store.Reservation) {
	n.T.Helper()
	n.Store(func(st *store.Store) error {
		return st.ViewIPAM(network, func(tx *store.IPAMTx) error {
			all = tx.All()
			return nil
		})
	})
	return all
}

// Empty fails the test unless network has no endpoint record and no
// reservation left.
func (n *Node) Empty(network string) {
	n.T.Helper()
	if eps := n.Endpoints(network); len(eps) > 0 {
		n.T.Errorf("endpoint records left in %s: %+v", network, eps)
	}
	if rs := n.Reservations(network); len(rs) > 0 {
		n.T.Errorf("reservations left in %s: %+v", network, rs)
	}
}
