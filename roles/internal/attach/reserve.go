package attach

import (
	"context"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/store"
)

// Reserve runs the IPAM plugin of the config (none when ipam.type is empty)
// and writes the endpoint record that record builds from its result (nil
// without IPAM); an error of record undoes the IPAM call. When IPAM is one of cnibox's roles it runs in process inside
// the same store transaction as the record; a foreign IPAM plugin runs
// first, without the store's lock, and is undone (DEL) when the record
// cannot be written. It returns IPAM's result.
//
// The record exists before any kernel work, so a call killed later leaves
// something DEL and GC find. Callers undo a later failure with Release.
func Reserve(ctx context.Context, a *cniplug.Args, dataDir string, record func(ipam *current.Result) (store.Endpoint, error)) (*current.Result, error) {
	t := a.Conf.IPAM.Type
	var res *current.Result
	ipam := func() error {
		if t == "" {
			return nil
		}
		r, err := a.DelegateAdd(ctx, t, a.StdinData)
		if err != nil {
			return err
		}
		if res, err = current.NewResultFromResult(r); err != nil {
			return cniplug.Errorf(types.ErrDecodingFailure, "IPAM plugin %q result: %w", t, err)
		}
		if len(res.IPs) == 0 {
			return cniplug.Errorf(types.ErrInvalidNetworkConfig, "IPAM plugin %q returned no address: check the ipam section", t)
		}
		a.Mark("ipam")
		return nil
	}
	inProcess := inProcessIPAM(a)
	if !inProcess {
		if err := ipam(); err != nil {
			return nil, err
		}
	}
	undoForeign := func() {
		if !inProcess {
			_ = a.DelegateDel(context.WithoutCancel(ctx), t, a.StdinData)
		}
	}
	st, err := OpenStore(a, dataDir)
	if err != nil {
		undoForeign()
		return nil, err
	}
	defer st.Close()
	key := store.SharedKey(st.Dir())
	a.SetShared(key, st)
	defer a.SetShared(key, nil)
	var roleErr error
	err = st.Batch(func() error {
		if inProcess {
			if roleErr = ipam(); roleErr != nil {
				return roleErr
			}
		}
		ep, err := record(res)
		if err != nil {
			roleErr = err
			return err
		}
		return st.PutEndpoint(ep)
	})
	if err != nil {
		undoForeign()
		if roleErr != nil {
			return nil, roleErr
		}
		return nil, err
	}
	a.Mark("record")
	return res, nil
}

// ReserveUndone is Reserve whose Release (without unhook) is pushed on undo,
// for an ADD whose later step fails.
func ReserveUndone(ctx context.Context, a *cniplug.Args, dataDir string, undo *cniplug.Undo, record func(ipam *current.Result) (store.Endpoint, error)) (*current.Result, error) {
	res, err := Reserve(ctx, a, dataDir, record)
	if err != nil {
		return nil, err
	}
	undo.Push(func() { _ = Release(context.WithoutCancel(ctx), a, dataDir, nil) })
	return res, nil
}

// inProcessIPAM reports whether the config's IPAM runs in process inside
// the caller's store transaction (also when there is no IPAM).
func inProcessIPAM(a *cniplug.Args) bool {
	t := a.Conf.IPAM.Type
	if t == "" {
		return true
	}
	r, ok := a.Registry.Lookup(t)
	return ok && r.JoinsCallerStore
}

// OpenStore opens the endpoint store named by the config's dataDir or the
// call's environment (an in-process delegate's environment is not the
// process's).
func OpenStore(a *cniplug.Args, dataDir string) (*store.Store, error) {
	return store.OpenWith(store.DirFrom(dataDir, a.Getenv), store.Options{Getenv: a.Getenv})
}
