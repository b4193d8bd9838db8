package ipamrole

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/ipam"
	"github.com/cnibox/cnibox/store"
)

// Pool is where an IPAM role keeps a network's reservations: the network
// in the store of a data directory.
type Pool struct {
	Role    string // the role, in messages: "host-local"
	Network string
	DataDir string // "" = $CNIBOX_DATA_DIR or store.DefaultDir
	Sticky  bool   // a pod gets its previous address back
	// JoinCaller: use the store the calling role shares (store.OpenShared)
	// as it is. Only for a role that does no slow work while it holds the
	// store (cniplug.Role.JoinsCallerStore).
	JoinCaller bool
	// Released, when set, runs in the transaction that released addresses,
	// with them.
	Released func(tx *store.IPAMTx, freed []store.Reservation) error
}

// Request is the allocator's request for the call's attachment, with the
// addresses the runtime asks for.
func (p *Pool) Request(a *cniplug.Args) (ipam.Request, error) {
	requested, err := a.RequestedIPs()
	return ipam.Request{
		Network:     p.Network,
		ContainerID: a.ContainerID,
		IfName:      a.IfName,
		Pod:         a.CNIArgs.Pod(),
		Requested:   requested,
		Sticky:      p.Sticky,
	}, err
}

// Update runs fn in one read-write transaction of the network, creating
// the store if there is none.
func (p *Pool) Update(a *cniplug.Args, fn func(tx *store.IPAMTx) error) error {
	return p.open(a, false, func(s *store.Store) error { return s.IPAM(p.Network, fn) })
}

// View runs fn in one read-only transaction of the network. A missing store
// is an error wrapping store.ErrNotFound.
func (p *Pool) View(a *cniplug.Args, fn func(tx *store.IPAMTx) error) error {
	return p.open(a, true, func(s *store.Store) error { return s.ViewIPAM(p.Network, fn) })
}

// Del releases every address of the call's attachment. Nothing to release
// (or no store at all) is success: DEL never fails because something is
// gone.
func (p *Pool) Del(a *cniplug.Args) error {
	_, err := p.release(a, func(tx *store.IPAMTx) ([]store.Reservation, error) {
		return ipam.Release(tx, a.ContainerID, a.IfName)
	})
	return err
}

// GC releases every reservation of the network whose attachment is not in
// the config's cni.dev/valid-attachments (or cni.dev/attachments), and says
// on stderr what it released.
func (p *Pool) GC(a *cniplug.Args) error {
	// An absent list would release every address of the network: only do
	// that when the runtime says so with an empty list.
	var keys map[string]json.RawMessage
	_ = json.Unmarshal(a.StdinData, &keys)
	if _, ok := keys["cni.dev/valid-attachments"]; !ok {
		if _, ok := keys["cni.dev/attachments"]; !ok {
			return cniplug.ConfError("cni.dev/valid-attachments", "missing: GC releases every address not in this list; pass the attachments to keep ([] to release all)")
		}
	}
	freed, err := p.release(a, func(tx *store.IPAMTx) ([]store.Reservation, error) {
		return ipam.GC(tx, a.Conf.Keeps)
	})
	if err == nil && a.Stderr != nil {
		for _, r := range freed {
			fmt.Fprintf(a.Stderr, "cnibox %s GC: network %q: released %s of container %s interface %s\n", p.Role, p.Network, r.Addr, r.ContainerID, r.IfName)
		}
	}
	return err
}

// release runs free, then Released, in one transaction of a store that must
// exist already; no store is nothing released.
func (p *Pool) release(a *cniplug.Args, free func(tx *store.IPAMTx) ([]store.Reservation, error)) ([]store.Reservation, error) {
	var freed []store.Reservation
	err := p.open(a, true, func(s *store.Store) error {
		return s.IPAM(p.Network, func(tx *store.IPAMTx) (err error) {
			if freed, err = free(tx); err != nil || p.Released == nil {
				return err
			}
			return p.Released(tx, freed)
		})
	})
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	return freed, err
}

// open opens the store for one transaction's time and closes it again (a
// store the caller shares, with JoinCaller, is used as it is). Store errors
// keep their codes (busy: 11). noCreate makes a missing store an error
// wrapping store.ErrNotFound.
func (p *Pool) open(a *cniplug.Args, noCreate bool, fn func(s *store.Store) error) error {
	var shared func(key any) any
	if p.JoinCaller {
		shared = a.Shared
	}
	s, done, err := store.OpenShared(shared, store.DirFrom(p.DataDir, a.Getenv), store.Options{Getenv: a.Getenv, NoCreate: noCreate})
	if err != nil {
		return err
	}
	err = fn(s)
	if cerr := done(); err == nil && cerr != nil {
		err = fmt.Errorf("close store %s: %w", s.Path(), cerr)
	}
	return err
}
