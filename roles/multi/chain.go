package multi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/version"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/roles/internal/delegate"
)

// The chain* functions run one delegate network's conflist the way libcni's
// AddNetworkList, DelNetworkList, CheckNetworkList, GCNetworkList and
// GetStatusNetworkList do, through cniplug's delegation (in process for
// cnibox's roles, exec through CNI_PATH otherwise) with the delegate's own
// CNI_IFNAME. One difference: DEL goes on past a failing plugin and reports
// every failure, so one broken plugin does not keep the others' state alive.

// chainConf builds one plugin's config as libcni's buildOneConfig does: the
// list's name and cniVersion, prevResult when there is one, and runtimeConfig
// with the capabilities the plugin declares out of rc.
func chainConf(list *libcni.NetworkConfigList, p *libcni.PluginConfig, prev any, rc map[string]any) ([]byte, error) {
	inject := map[string]any{"name": list.Name, "cniVersion": list.CNIVersion}
	if prev != nil {
		inject["prevResult"] = prev
	}
	rt := map[string]any{}
	for capability, on := range p.Network.Capabilities {
		if v, ok := rc[capability]; on && ok {
			rt[capability] = v
		}
	}
	if len(rt) > 0 {
		inject["runtimeConfig"] = rt
	}
	return delegate.Inject(p.Bytes, inject)
}

func pluginErr(j int, p *libcni.PluginConfig, verb string, err error) error {
	return fmt.Errorf("plugin %d (type %s) %s: %w", j, p.Network.Type, verb, err)
}

// atLeast reports whether the list's cniVersion is v or later.
func atLeast(list *libcni.NetworkConfigList, v string) bool {
	ok, err := version.GreaterThanOrEqualTo(list.CNIVersion, v)
	return err == nil && ok
}

// joinCoded joins errs; the result carries the code of the first.
func joinCoded(errs []error) error {
	switch len(errs) {
	case 0:
		return nil
	case 1:
		return errs[0]
	}
	return cniplug.WithCode(cniplug.CodeOf(errs[0]), errors.Join(errs...))
}

// chainAdd runs ADD of every plugin of d in order, each getting the previous
// one's result, and returns the last result. On failure, failed is the index
// of the plugin that failed.
func chainAdd(ctx context.Context, a *cniplug.Args, d *multiDelegate, rc map[string]any) (res types.Result, failed int, err error) {
	for j, p := range d.List.Plugins {
		var prev any
		if res != nil {
			prev = res
		}
		conf, err := chainConf(d.List, p, prev, rc)
		if err != nil {
			return nil, j, err
		}
		if res, err = a.DelegateAddAs(ctx, p.Network.Type, conf, d.IfName); err != nil {
			return nil, j, pluginErr(j, p, "ADD", err)
		}
	}
	return res, -1, nil
}

// chainDel runs DEL of every plugin of d in reverse, with the recorded result
// as prevResult (cniVersion 0.4.0 and later, as libcni). A failure for which
// ignore (if not nil) reports true is logged instead of returned.
func chainDel(ctx context.Context, a *cniplug.Args, d *multiDelegate, result json.RawMessage, rc map[string]any, ignore func(j int, err error) bool) error {
	var prev any
	if len(result) > 0 && atLeast(d.List, "0.4.0") {
		prev = result
	}
	var errs []error
	for j := len(d.List.Plugins) - 1; j >= 0; j-- {
		p := d.List.Plugins[j]
		conf, err := chainConf(d.List, p, prev, rc)
		if err == nil {
			err = a.DelegateDelAs(ctx, p.Network.Type, conf, d.IfName)
		}
		if err != nil {
			err = pluginErr(j, p, "DEL", err)
			if ignore != nil && ignore(j, err) {
				delegate.Log(a, "%s: %s DEL (ignored): %v", a.Conf.Type, d.describe(), err)
				continue
			}
			errs = append(errs, err)
		}
	}
	return joinCoded(errs)
}

// chainCheck runs CHECK of every plugin of d in order with the recorded
// result; lists older than 0.4.0 (no CHECK) and with disableCheck pass.
func chainCheck(ctx context.Context, a *cniplug.Args, d *multiDelegate, result json.RawMessage, rc map[string]any) error {
	if !atLeast(d.List, "0.4.0") || d.List.DisableCheck {
		return nil
	}
	if len(result) == 0 {
		return cniplug.Errorf(types.ErrInvalidNetworkConfig, "no ADD result of this network is known (no record, no prevResult): run ADD again")
	}
	for j, p := range d.List.Plugins {
		conf, err := chainConf(d.List, p, result, rc)
		if err != nil {
			return err
		}
		if err := a.DelegateCheckAs(ctx, p.Network.Type, conf, d.IfName); err != nil {
			return pluginErr(j, p, "CHECK", err)
		}
	}
	return nil
}

// chainGC runs GC of every plugin of d with the valid attachments (lists
// older than 1.1.0 and with disableGC are skipped, as libcni does).
func chainGC(ctx context.Context, a *cniplug.Args, d *multiDelegate, valid []types.GCAttachment) error {
	if !atLeast(d.List, "1.1.0") || d.List.DisableGC {
		return nil
	}
	inject := delegate.GCAttachments(valid)
	inject["name"], inject["cniVersion"] = d.List.Name, d.List.CNIVersion
	var errs []error
	for j, p := range d.List.Plugins {
		conf, err := delegate.Inject(p.Bytes, inject)
		if err == nil {
			err = a.DelegateGC(ctx, p.Network.Type, conf)
		}
		if err != nil {
			errs = append(errs, pluginErr(j, p, "GC", err))
		}
	}
	return joinCoded(errs)
}

// chainStatus runs STATUS of every plugin of d (lists of 1.1.0 and later)
// and returns the first failure.
func chainStatus(ctx context.Context, a *cniplug.Args, d *multiDelegate) error {
	if !atLeast(d.List, "1.1.0") {
		return nil
	}
	inject := map[string]any{"name": d.List.Name, "cniVersion": d.List.CNIVersion}
	for j, p := range d.List.Plugins {
		conf, err := delegate.Inject(p.Bytes, inject)
		if err != nil {
			return err
		}
		if err := a.DelegateStatus(ctx, p.Network.Type, conf); err != nil {
			return pluginErr(j, p, "STATUS", err)
		}
	}
	return nil
}
