package meta

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/store"
)

// Helpers shared by the meta roles that delegate whole networks (flannel,
// multi): the delegate record in the store and JSON injection into a
// delegate's config. Names carry the dlg prefix; other roles live in this
// package too.

// dlgStoreErr gives a store error its CNI code: busy is 11 (try again), the
// rest an I/O failure.
func dlgStoreErr(err error) error {
	if errors.Is(err, store.ErrBusy) {
		return cniplug.WithCode(types.ErrTryAgainLater, err)
	}
	return cniplug.WithCode(types.ErrIOFailure, err)
}

// dlgStore opens the store in dir ("" = $CNIBOX_DATA_DIR or the default).
// With noCreate, a store that was never created returns (nil, nil).
func dlgStore(a *cniplug.Args, dir string, noCreate bool) (*store.Store, error) {
	st, err := store.OpenWith(store.DirFrom(dir, a.Getenv), store.Options{Getenv: a.Getenv, NoCreate: noCreate})
	if noCreate && errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, dlgStoreErr(err)
	}
	return st, nil
}

// dlgGetRecord returns the delegate record of (network, CNI_CONTAINERID,
// CNI_IFNAME), if there is one.
func dlgGetRecord(a *cniplug.Args, dir string) (store.DelegateRecord, bool, error) {
	st, err := dlgStore(a, dir, true)
	if err != nil || st == nil {
		return store.DelegateRecord{}, false, err
	}
	defer st.Close()
	rec, found, err := st.GetDelegateRecord(a.Conf.Name, a.ContainerID, a.IfName)
	if err != nil {
		return rec, false, dlgStoreErr(err)
	}
	return rec, found, nil
}

// dlgRecords returns the records that the meta role plugin keeps for network.
func dlgRecords(a *cniplug.Args, dir, network, plugin string) ([]store.DelegateRecord, error) {
	st, err := dlgStore(a, dir, true)
	if err != nil || st == nil {
		return nil, err
	}
	defer st.Close()
	all, err := st.DelegateRecords(network)
	if err != nil {
		return nil, dlgStoreErr(err)
	}
	var out []store.DelegateRecord
	for _, r := range all {
		if r.Plugin == plugin {
			out = append(out, r)
		}
	}
	return out, nil
}

// dlgPutRecord writes rec in one transaction.
func dlgPutRecord(a *cniplug.Args, dir string, rec store.DelegateRecord) error {
	st, err := dlgStore(a, dir, false)
	if err != nil {
		return err
	}
	defer st.Close()
	if err := st.PutDelegateRecord(rec); err != nil {
		return dlgStoreErr(err)
	}
	return nil
}

// dlgDeleteRecord removes the record of one attachment of network (a missing
// one is fine).
func dlgDeleteRecord(a *cniplug.Args, dir, network, containerID, ifname string) error {
	st, err := dlgStore(a, dir, true)
	if err != nil || st == nil {
		return err
	}
	defer st.Close()
	if err := st.DeleteDelegateRecord(network, containerID, ifname); err != nil {
		return dlgStoreErr(err)
	}
	return nil
}

// dlgInject returns the JSON object conf with the given keys set (values are
// marshalled; a json.RawMessage goes in as it is). Every other key is kept
// byte for byte.
func dlgInject(conf []byte, kv map[string]any) ([]byte, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(conf, &m); err != nil {
		return nil, cniplug.Errorf(types.ErrDecodingFailure, "delegate config is not a JSON object: %w", err)
	}
	if m == nil {
		m = map[string]json.RawMessage{}
	}
	for k, v := range kv {
		b, err := json.Marshal(v)
		if err != nil {
			return nil, cniplug.Errorf(types.ErrInternal, "encode %q for the delegate config: %w", k, err)
		}
		m[k] = b
	}
	out, err := json.Marshal(m)
	if err != nil {
		return nil, cniplug.Errorf(types.ErrInternal, "encode the delegate config: %w", err)
	}
	return out, nil
}

// dlgGCAttachments is the GC valid list in both spellings the spec has used.
func dlgGCAttachments(keep []types.GCAttachment) map[string]any {
	if keep == nil {
		keep = []types.GCAttachment{}
	}
	return map[string]any{"cni.dev/valid-attachments": keep, "cni.dev/attachments": keep}
}

// dlgLog writes one line to the call's stderr (never stdout).
func dlgLog(a *cniplug.Args, format string, args ...any) {
	if a.Stderr != nil {
		fmt.Fprintf(a.Stderr, format+"\n", args...)
	}
}
