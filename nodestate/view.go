package nodestate

import (
	"errors"
	"fmt"
	"time"

	"github.com/containernetworking/cni/libcni"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nft"
	"github.com/cnibox/cnibox/store"
)

// Options say where the node keeps its state.
type Options struct {
	// DataDir is the store's directory ("" = $CNIBOX_DATA_DIR or the default).
	DataDir string
	// CacheDir is libcni's cache directory ("" = not read).
	CacheDir string
	// Roles are the roles of the binary: what each declares about itself
	// (its host veths, its records and what goes with them) is how
	// leftovers are found.
	Roles *cniplug.Registry
}

// View is what the rules look at, read once from the store, libcni's cache
// and the kernel.
type View struct {
	BootID    string
	Endpoints []store.Endpoint
	IPAM      []store.IPAMView
	Cached    []*libcni.NetworkAttachment
	Links     []netops.Link
	Masq      []nft.MasqEntry
	// The roles' records and what they read of the kernel.
	roleView
	// Netns says, per netns path in the records and the cache, whether it
	// is a live network namespace. A path missing here counts as live.
	Netns map[string]bool
	// Roles are the roles whose declarations the rules ask (nil: none).
	Roles *cniplug.Registry
	// Now is when the view was read (rules 1c and 2c; zero: those rules
	// find nothing).
	Now time.Time
}

// ReadView reads the store (a store that was never created reads as
// empty), libcni's cache and the kernel of host.
func ReadView(host *netops.Handle, o Options) (View, error) {
	v := View{BootID: store.BootID(), Netns: map[string]bool{}, Roles: o.Roles, Now: time.Now()}
	st, err := store.OpenWith(store.Dir(o.DataDir), store.Options{NoCreate: true})
	switch {
	case errors.Is(err, store.ErrNotFound):
	case err != nil:
		return v, err
	default:
		err = readStore(st, o.Roles, &v)
		st.Close()
		if err != nil {
			return v, err
		}
	}
	if o.CacheDir != "" {
		cached, err := libcni.NewCNIConfigWithCacheDir(nil, o.CacheDir, nil).GetCachedAttachments("")
		if err != nil {
			return v, fmt.Errorf("read libcni's cache in %s: %w", o.CacheDir, err)
		}
		v.Cached = cached
	}
	if v.Links, err = host.Links(); err != nil {
		return v, err
	}
	if v.Masq, err = host.NFT().MasqEntries(); err != nil {
		return v, err
	}
	if err := readRoleKernel(host, o.Roles, &v.roleView); err != nil {
		return v, err
	}
	v.probeNetns()
	return v, nil
}

func readStore(st *store.Store, roles *cniplug.Registry, v *View) error {
	var err error
	if v.Endpoints, err = st.Endpoints(""); err != nil {
		return err
	}
	if v.IPAM, err = st.IPAMViews(""); err != nil {
		return err
	}
	return readRoleRecords(st, roles, &v.roleView)
}

// probeNetns fills v.Netns for every netns path the records and the cache
// name.
func (v *View) probeNetns() {
	probe := func(path string) {
		if path == "" {
			return
		}
		if _, done := v.Netns[path]; done {
			return
		}
		if ok, err := netops.NetnsExists(path); err == nil {
			v.Netns[path] = ok
		}
	}
	for _, ep := range v.Endpoints {
		probe(ep.Netns)
	}
	for _, a := range v.Cached {
		probe(a.NetNS)
	}
	for _, recs := range v.Records {
		for _, r := range recs {
			probe(r.Netns)
		}
	}
}
