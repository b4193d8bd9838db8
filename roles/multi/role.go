package multi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/internal/fault"
	"github.com/cnibox/cnibox/roles/internal/delegate"
)

// Role is the "multi" role: several networks per pod, Multus style. The
// first delegate is the primary (CNI_IFNAME, its result is returned); the
// others get net1, net2, ... or their own "ifname".
var Role = &cniplug.Role{
	Name:  multiPlugin,
	About: about,
	Verbs: &verbs,
	Known: &known,
}

const multiPlugin = "multi"

const about = "multi attaches a pod to several networks, Multus style: \"delegates\" lists inline network configs, conflists " +
	"or paths of conflist files. The first is the primary network (CNI_IFNAME, its result is returned); the others " +
	"get net1, net2, ... or their own \"ifname\". A failed ADD removes what the earlier delegates set up; DEL runs " +
	"the recorded delegates in reverse and goes on past failures."

// aliasAbout is the explanation of the multi role under Multus' type
// names; the name goes before it.
const aliasAbout = " is the multi role under Multus' type name: it takes Multus v4's configuration (clusterNetwork, " +
	"defaultNetworks, delegates, the pod's networks through cnibox-agent). " + about

// verbs are the verbs of multi and its Multus names.
var verbs = cniplug.ConfVerbs[cniplug.NoConf]{Add: multiAdd, Del: multiDel, Check: multiCheck, GC: multiGC, Status: multiStatus}

// MultusRole and MultusShimRole are the multi role under the type names of
// Multus' thin plugin and thick shim, so that Multus' own configs
// ("type": "multus" / "multus-shim") run unchanged.
var (
	MultusRole = &cniplug.Role{
		Name: "multus", About: "multus" + aliasAbout,
		Verbs: &verbs, Known: &known,
	}
	MultusShimRole = &cniplug.Role{
		Name: "multus-shim", About: "multus-shim" + aliasAbout,
		Verbs: &verbs, Known: &known,
	}
)

// PassthruRole is Multus' passthru plugin: the first plugin of an
// auxiliaryCNIChainName chain, it returns an empty result for the chain's
// other plugins to work on, and has nothing to delete.
var PassthruRole = &cniplug.Role{
	Name:  passthruPlugin,
	About: "passthru returns an empty result (the start of Multus' auxiliary chain, auxiliaryCNIChainName) and has nothing to delete or check.",
	Verbs: &cniplug.ConfVerbs[cniplug.NoConf]{Add: func(_ context.Context, a *cniplug.Args, _ cniplug.NoConf) (types.Result, error) {
		return &current.Result{CNIVersion: a.Conf.CNIVersion, Interfaces: []*current.Interface{}, IPs: []*current.IPConfig{}, Routes: []*types.Route{}}, nil
	}},
	Known: &passthruKnown,
}

// primaryRC is the runtimeConfig that delegate i gets: the primary network
// takes the runtime's capability arguments (port mappings, bandwidth, ips,
// mac ...); the other networks get none, so an address or MAC meant for the
// pod's main interface is not claimed twice.
func primaryRC(c map[string]any, i int) map[string]any {
	if i == 0 {
		return c
	}
	return nil
}

func multiAdd(ctx context.Context, a *cniplug.Args, _ cniplug.NoConf) (types.Result, error) {
	c, err := parseMultiConf(a, a.IfName)
	if err != nil {
		return nil, err
	}
	if err := c.Multus.waitReady(ctx); err != nil {
		return nil, err
	}
	a.Path = c.Multus.binPath(a.Path)
	pod, err := multiK8sSelect(ctx, a, c) // k8s.go: the pod's networks
	if err != nil {
		return nil, err
	}
	if c.pendingCluster != "" && pod == nil {
		return nil, cniplug.Errorf(types.ErrInvalidNetworkConfig, "multi: clusterNetwork %q is not resolved", c.pendingCluster)
	}
	if err := c.appendAux(a.Conf.CNIVersion); err != nil {
		return nil, err
	}
	if err := prepareDevInfo(a, c); err != nil {
		return nil, err
	}
	rec := c.record(a)
	// Recorded before any delegate runs: a DEL after a crash half way
	// replays exactly these networks.
	if err := delegate.PutRecord(a, c.DataDir, rec); err != nil {
		return nil, err
	}
	fault.Point("multi/add/after-record")
	results := make([]types.Result, len(c.Delegates))
	kept := make([]types.Result, len(c.Delegates)) // as recorded: default-route applied
	for i, d := range c.Delegates {
		res, at, err := chainAdd(ctx, a, d, primaryRC(c.RuntimeConfig, i))
		if err == nil && res == nil {
			at, err = len(d.List.Plugins)-1, cniplug.Errorf(types.ErrInternal, "it returned no result")
		}
		if err != nil {
			failed := fmt.Errorf("multi: %s ADD: %w", d.describe(), err)
			return nil, multiRollback(ctx, a, c, results[:i+1], at, failed)
		}
		results[i] = res
		recorded, err := applyGateway(a, d, res)
		if err != nil {
			return nil, multiRollback(ctx, a, c, results[:i+1], -1, fmt.Errorf("multi: %s: %w", d.describe(), err))
		}
		kept[i] = recorded
		if fault.Enabled {
			fault.Point(fmt.Sprintf("multi/add/after-delegate%d", i))
		}
	}
	for i, res := range kept {
		if rec.Delegates[i].Result, err = json.Marshal(res); err != nil {
			return nil, cniplug.Errorf(types.ErrInternal, "multi: encode the result of %s: %w", c.Delegates[i].describe(), err)
		}
	}
	if err := delegate.PutRecord(a, c.DataDir, rec); err != nil {
		return nil, multiRollback(ctx, a, c, results, -1, err)
	}
	fault.Point("multi/add/after-results")
	if err := pod.report(ctx, a, c, results, readDevInfo(c)); err != nil {
		return nil, multiRollback(ctx, a, c, results, -1, err)
	}
	return results[0], nil
}

// multiRollback deletes the delegates that were added (and the last one,
// whose plugins before the failing one may have added things), newest first,
// then the record. The failing plugin (index failedAt of the last delegate)
// gets its DEL too, but its failure is only logged: its ADD already failed
// (bad config, missing binary) and it set up nothing. It returns failed,
// joined with any other failure of the rollback; the code is failed's. A
// failed rollback keeps the record for the runtime's DEL.
func multiRollback(ctx context.Context, a *cniplug.Args, c *multiConf, results []types.Result, failedAt int, failed error) error {
	errs := []error{failed}
	for i := len(results) - 1; i >= 0; i-- {
		d := c.Delegates[i]
		var raw json.RawMessage
		if results[i] != nil {
			raw, _ = json.Marshal(results[i])
		}
		var ignore func(int, error) bool
		if i == len(results)-1 && failedAt >= 0 {
			ignore = func(j int, _ error) bool { return j == failedAt }
		}
		if err := chainDel(ctx, a, d, raw, primaryRC(c.RuntimeConfig, i), ignore); err != nil {
			errs = append(errs, fmt.Errorf("rollback: %s DEL: %w", d.describe(), err))
		}
	}
	if len(errs) == 1 {
		if err := delegate.DeleteRecord(a, c.DataDir, a.Conf.Name, a.ContainerID, a.IfName); err != nil {
			delegate.Log(a, "multi ADD: remove the delegate record after the rollback: %v", err)
		}
		return failed
	}
	return cniplug.WithCode(cniplug.CodeOf(failed), errors.Join(errs...))
}
