package chain

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/internal/fault"
	"github.com/cnibox/cnibox/store"
)

// Dir is the call's store directory: the config's "dataDir", read alone
// (DEL and GC work from the record and must not fail on a config that ADD
// would refuse), else $CNIBOX_DATA_DIR, else the default.
func Dir(a *cniplug.Args) string {
	var c struct {
		DataDir string `json:"dataDir"`
	}
	_ = json.Unmarshal(a.StdinData, &c)
	return store.DirFrom(c.DataDir, a.Getenv)
}

// OpenStore opens the call's store, creating it if needed.
func OpenStore(a *cniplug.Args) (*store.Store, error) {
	return store.OpenWith(Dir(a), store.Options{Getenv: a.Getenv})
}

// OpenRecords opens the call's store to read or remove records. A store
// that was never created holds none: it is (nil, nil), and is not created.
func OpenRecords(a *cniplug.Args) (*store.Store, error) {
	st, err := store.OpenWith(Dir(a), store.Options{Getenv: a.Getenv, NoCreate: true})
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	return st, err
}

// Records is how a role keeps the record of an attachment in the store:
// Kind is the role's kind of record in the store (store.Kind), keyed
// by network, container ID and ifname, and the role's DEL from it. Its
// methods act on the call's attachment.
type Records[R any] struct {
	Kind *store.Kind[R]
	// Teardown undoes what ADD did from the call's record (found false:
	// there is none, and it does what it can without); AfterDel is the
	// fault point that marks the record removed after it (see Del).
	Teardown func(ctx context.Context, a *cniplug.Args, rec R, found bool) error
	AfterDel string
}

// lookup reads the record of the call's attachment.
func (k Records[R]) lookup(a *cniplug.Args) (rec R, found bool, err error) {
	st, err := OpenRecords(a)
	if err != nil || st == nil {
		return rec, false, err
	}
	defer st.Close()
	return k.Kind.In(st).Get(a.Conf.Name, a.ContainerID, a.IfName)
}

// Remember writes rec as the record of the call's attachment, or, when one
// is there already (an ADD repeated) and merge is not nil, merge(old, rec).
// It returns the record it replaced (the zero R when there was none), and
// pushes the undo that puts that back (or removes the new one).
func (k Records[R]) Remember(a *cniplug.Args, rec R, merge func(old, now R) R, undo *cniplug.Undo) (R, error) {
	var zero R
	dir := Dir(a)
	network, cid, ifname := a.Conf.Name, a.ContainerID, a.IfName
	st, err := store.Open(dir)
	if err != nil {
		return zero, err
	}
	defer st.Close()
	old, found, err := k.Kind.In(st).Get(network, cid, ifname)
	if err != nil {
		return zero, err
	}
	if !found {
		old = zero
	} else if merge != nil {
		rec = merge(old, rec)
	}
	if err := k.Kind.In(st).Put(rec); err != nil {
		return zero, err
	}
	undo.Push(func() {
		st, err := store.Open(dir)
		if err != nil {
			return
		}
		defer st.Close()
		if found {
			_ = k.Kind.In(st).Put(old)
		} else {
			_ = k.Kind.In(st).Delete(network, cid, ifname)
		}
	})
	return old, nil
}

// Del runs a chained role's DEL from the call's record, without its config
// (DEL must not fail on a config that ADD would refuse): Teardown, then the
// record, if there was one, is removed, and the fault point AfterDel marks
// that.
func (k *Records[R]) Del(ctx context.Context, a *cniplug.Args) error {
	rec, found, err := k.lookup(a)
	if err != nil {
		return err
	}
	if err := k.Teardown(ctx, a, rec, found); err != nil || !found {
		return err
	}
	if err := k.forget(a); err != nil {
		return err
	}
	fault.Point(k.AfterDel)
	return nil
}

// forget removes the record of the call's attachment (a missing one is
// fine).
func (k Records[R]) forget(a *cniplug.Args) error {
	st, err := OpenStore(a)
	if err != nil {
		return err
	}
	defer st.Close()
	return k.Kind.In(st).Delete(a.Conf.Name, a.ContainerID, a.IfName)
}
