// Package delegate is what the roles that delegate whole networks (flannel,
// multi) share: the delegate record in the store, JSON injection into a
// delegate's config, their config decoding errors, and the bounded read of
// the files they take configs from (a delegate's conflist, subnet.env).
package delegate

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/internal/delegaterec"
	"github.com/cnibox/cnibox/store"
)

// Store opens the store in dir ("" = $CNIBOX_DATA_DIR or the default).
// With noCreate, a store that was never created returns (nil, nil).
func Store(a *cniplug.Args, dir string, noCreate bool) (*store.Store, error) {
	st, err := store.OpenWith(store.DirFrom(dir, a.Getenv), store.Options{Getenv: a.Getenv, NoCreate: noCreate})
	if noCreate && errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return st, nil
}

// NewRecord is the delegate record of the call's attachment, kept by the
// meta role plugin, with the delegates ds.
func NewRecord(a *cniplug.Args, plugin string, ds ...delegaterec.Delegate) delegaterec.Record {
	return delegaterec.Record{
		Network: a.Conf.Name, ContainerID: a.ContainerID, IfName: a.IfName,
		Netns: a.Netns, Pod: a.CNIArgs.Pod(), Plugin: plugin, Delegates: ds,
	}
}

// GetRecord returns the delegate record of (network, CNI_CONTAINERID,
// CNI_IFNAME), if there is one.
func GetRecord(a *cniplug.Args, dir string) (delegaterec.Record, bool, error) {
	st, err := Store(a, dir, true)
	if err != nil || st == nil {
		return delegaterec.Record{}, false, err
	}
	defer st.Close()
	rec, found, err := delegaterec.Records.In(st).Get(a.Conf.Name, a.ContainerID, a.IfName)
	if err != nil {
		return rec, false, err
	}
	return rec, found, nil
}

// Records returns the records that the meta role plugin keeps for network.
func Records(a *cniplug.Args, dir, network, plugin string) ([]delegaterec.Record, error) {
	st, err := Store(a, dir, true)
	if err != nil || st == nil {
		return nil, err
	}
	defer st.Close()
	all, err := delegaterec.Records.In(st).List(network)
	if err != nil {
		return nil, err
	}
	var out []delegaterec.Record
	for _, r := range all {
		if r.Plugin == plugin {
			out = append(out, r)
		}
	}
	return out, nil
}

// PutRecord writes rec in one transaction.
func PutRecord(a *cniplug.Args, dir string, rec delegaterec.Record) error {
	st, err := Store(a, dir, false)
	if err != nil {
		return err
	}
	defer st.Close()
	if err := delegaterec.Records.In(st).Put(rec); err != nil {
		return err
	}
	return nil
}

// DeleteRecord removes the record of one attachment of network (a missing
// one is fine).
func DeleteRecord(a *cniplug.Args, dir, network, containerID, ifname string) error {
	st, err := Store(a, dir, true)
	if err != nil || st == nil {
		return err
	}
	defer st.Close()
	if err := delegaterec.Records.In(st).Delete(network, containerID, ifname); err != nil {
		return err
	}
	return nil
}

// Inject returns the JSON object conf with the given keys set (values are
// marshalled; a json.RawMessage goes in as it is). Every other key is kept
// byte for byte.
func Inject(conf []byte, kv map[string]any) ([]byte, error) {
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

// GCAttachments is the GC valid list in both spellings the spec has used.
func GCAttachments(keep []types.GCAttachment) map[string]any {
	if keep == nil {
		keep = []types.GCAttachment{}
	}
	return map[string]any{"cni.dev/valid-attachments": keep, "cni.dev/attachments": keep}
}

// Log writes one line to the call's stderr (never stdout).
func Log(a *cniplug.Args, format string, args ...any) {
	if a.Stderr != nil {
		fmt.Fprintf(a.Stderr, format+"\n", args...)
	}
}
