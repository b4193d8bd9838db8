package roletest

import (
	"testing"

	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/store"
)

// Store runs f on the node's store, open for the call; an error fails the
// test.
func (n *Node) Store(f func(*store.Store) error) {
	n.T.Helper()
	st, err := store.Open(n.Dir)
	if err != nil {
		n.T.Fatal(err)
	}
	defer st.Close()
	if err := f(st); err != nil {
		n.T.Fatal(err)
	}
}

// InNS runs f on a handle of namespace ns ("" = the node); an error fails
// the test.
func InNS(t testing.TB, ns string, f func(*netops.Handle) error) {
	t.Helper()
	h, err := netops.Open(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if err := f(h); err != nil {
		t.Fatal(err)
	}
}

// Endpoints returns the endpoint records of network.
func (n *Node) Endpoints(network string) (eps []store.Endpoint) {
	n.T.Helper()
	n.Store(func(st *store.Store) (err error) {
		eps, err = st.Endpoints(network)
		return err
	})
	return eps
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
