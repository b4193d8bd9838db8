package multi

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/internal/delegaterec"
	"github.com/cnibox/cnibox/internal/fault"
	"github.com/cnibox/cnibox/roles/internal/delegate"
)

// multiAttachment is what DEL and CHECK act on: the delegates with their
// ADD results, from the record or else from the config.
type multiAttachment struct {
	c         *multiConf
	delegates []*multiDelegate
	results   []json.RawMessage
	recorded  bool
}

// multiLoad finds the attachment's delegates: the record's, else the
// config's (with the runtime's prevResult as the primary's result).
func multiLoad(a *cniplug.Args) (*multiAttachment, error) {
	c, cerr := parseMultiConf(a, a.IfName)
	dataDir := ""
	if cerr == nil {
		dataDir = c.DataDir
		a.Path = c.Multus.binPath(a.Path)
	} else {
		// The record may still be found where the config's dataDir points.
		var raw struct {
			DataDir string `json:"dataDir"`
		}
		_ = json.Unmarshal(a.StdinData, &raw)
		dataDir = raw.DataDir
	}
	rec, found, err := delegate.GetRecord(a, dataDir)
	if err != nil {
		return nil, err
	}
	if found {
		ds, err := delegatesFromRecord(rec)
		if err != nil {
			return nil, err
		}
		at := &multiAttachment{c: c, delegates: ds, recorded: true}
		if at.c == nil {
			at.c = &multiConf{DataDir: dataDir}
		}
		for _, d := range rec.Delegates {
			at.results = append(at.results, d.Result)
		}
		return at, nil
	}
	if cerr != nil {
		return nil, cerr
	}
	at := &multiAttachment{c: c, delegates: c.Delegates, results: make([]json.RawMessage, len(c.Delegates))}
	if prev := a.Conf.PluginConf.PrevResult; prev != nil {
		if conv, err := prev.GetAsVersion(c.Delegates[0].List.CNIVersion); err == nil {
			prev = conv
		}
		at.results[0], _ = json.Marshal(prev)
	}
	return at, nil
}

// multiDel deletes every delegate in reverse, going on past failures, and
// then the record. Every failure is reported; the code is the first one's.
func multiDel(ctx context.Context, a *cniplug.Args, _ cniplug.NoConf) error {
	at, err := multiLoad(a)
	if err != nil {
		// No record means no delegate was ever added (the record is
		// written before the first one runs), so a config that no longer
		// resolves leaves nothing to delete.
		if cniplug.CodeOf(err) == types.ErrInvalidNetworkConfig || cniplug.CodeOf(err) == types.ErrDecodingFailure {
			delegate.Log(a, "multi DEL: no delegate record for container %s ifname %s, and the config does not resolve (%v): nothing to delete", a.ContainerID, a.IfName, err)
			return nil
		}
		return err
	}
	// Without a record the delegates come from the config; one whose DEL
	// finds its config invalid (6, 7: bad field, plugin not installed) was
	// never added with it either, since ADD would have failed the same way.
	var ignore func(int, error) bool
	if !at.recorded {
		multiK8sDelegates(ctx, a, at) // del_k8s.go: the pod's networks, as Multus without its cache
		ignore = func(_ int, err error) bool {
			code := cniplug.CodeOf(err)
			return code == types.ErrDecodingFailure || code == types.ErrInvalidNetworkConfig
		}
	}
	var errs []error
	for i := len(at.delegates) - 1; i >= 0; i-- {
		d := at.delegates[i]
		if err := chainDel(ctx, a, d, at.results[i], primaryRC(at.c.RuntimeConfig, i), ignore); err != nil {
			errs = append(errs, fmt.Errorf("multi: %s DEL: %w", d.describe(), err))
		} else if fault.Enabled {
			fault.Point(fmt.Sprintf("multi/del/after-delegate%d", i))
		}
	}
	if len(errs) > 0 {
		return joinCoded(errs) // the record stays for the next DEL
	}
	if at.recorded {
		multiK8sClear(ctx, a) // k8s.go: best effort, DEL never needs the agent
		removeDevInfo(a, at.delegates)
	}
	if at.recorded {
		if err := delegate.DeleteRecord(a, at.c.DataDir, a.Conf.Name, a.ContainerID, a.IfName); err != nil {
			return err
		}
		fault.Point("multi/del/after-record")
	}
	return nil
}

// multiCheck runs CHECK of every delegate in order and returns the first
// failure.
func multiCheck(ctx context.Context, a *cniplug.Args, _ cniplug.NoConf) error {
	at, err := multiLoad(a)
	if err != nil {
		return err
	}
	for i, d := range at.delegates {
		if err := chainCheck(ctx, a, d, at.results[i], primaryRC(at.c.RuntimeConfig, i)); err != nil {
			return fmt.Errorf("multi: %s CHECK: %w", d.describe(), err)
		}
	}
	return nil
}

// multiGC deletes the recorded attachments that are not in the valid list
// (as libcni does with its cache), then forwards GC to every delegate of the
// config with the valid list mapped to that delegate's interfaces.
func multiGC(ctx context.Context, a *cniplug.Args, _ cniplug.NoConf) error {
	c, err := parseMultiConf(a, "")
	if err != nil {
		return err
	}
	a.Path = c.Multus.binPath(a.Path)
	if err := c.appendAux(a.Conf.CNIVersion); err != nil {
		return err
	}
	recs, err := delegate.Records(a, c.DataDir, a.Conf.Name, multiPlugin)
	if err != nil {
		return err
	}
	var errs []error
	kept := map[[2]string]delegaterec.Record{}
	for _, r := range recs {
		if a.Conf.Keeps(r.ContainerID, r.IfName) {
			kept[[2]string{r.ContainerID, r.IfName}] = r
			continue
		}
		if err := multiDelStale(ctx, a, c, r); err != nil {
			errs = append(errs, err)
		}
	}
	for _, d := range c.Delegates {
		var valid []types.GCAttachment
		for _, k := range a.Conf.GCKeep() {
			ifname := d.IfName
			if d.Index == 0 {
				ifname = k.IfName
			}
			if r, ok := kept[[2]string{k.ContainerID, k.IfName}]; ok {
				for _, rd := range r.Delegates {
					if rd.Name == d.List.Name {
						ifname = rd.IfName
					}
				}
			}
			valid = append(valid, types.GCAttachment{ContainerID: k.ContainerID, IfName: ifname})
		}
		if err := chainGC(ctx, a, d, valid); err != nil {
			errs = append(errs, fmt.Errorf("multi: %s GC: %w", d.describe(), err))
		}
	}
	return joinCoded(errs)
}

// multiDelStale deletes a recorded attachment that GC does not keep, with
// the record's delegates, netns and results, then the record.
func multiDelStale(ctx context.Context, a *cniplug.Args, c *multiConf, r delegaterec.Record) error {
	ds, err := delegatesFromRecord(r)
	if err != nil {
		return err
	}
	b := *a
	b.ContainerID, b.IfName, b.Netns = r.ContainerID, r.IfName, r.Netns
	var errs []error
	for i := len(ds) - 1; i >= 0; i-- {
		if err := chainDel(ctx, &b, ds[i], r.Delegates[i].Result, nil, nil); err != nil {
			errs = append(errs, fmt.Errorf("multi GC: stale attachment %s/%s: %s DEL: %w", r.ContainerID, r.IfName, ds[i].describe(), err))
		}
	}
	if len(errs) > 0 {
		return joinCoded(errs)
	}
	return delegate.DeleteRecord(&b, c.DataDir, r.Network, r.ContainerID, r.IfName)
}

// multiStatus forwards STATUS to every delegate and returns the first
// failure (its code kept: 50 means a delegate is not ready).
func multiStatus(ctx context.Context, a *cniplug.Args, _ cniplug.NoConf) error {
	c, err := parseMultiConf(a, "")
	if err != nil {
		return err
	}
	if err := c.Multus.ready(); err != nil {
		return err
	}
	a.Path = c.Multus.binPath(a.Path)
	if err := c.appendAux(a.Conf.CNIVersion); err != nil {
		return err
	}
	for _, d := range c.Delegates {
		if err := chainStatus(ctx, a, d); err != nil {
			return fmt.Errorf("multi: %s STATUS: %w", d.describe(), err)
		}
	}
	return nil
}
