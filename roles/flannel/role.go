package flannel

import (
	"context"
	"errors"
	"fmt"
	"io/fs"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/internal/delegaterec"
	"github.com/cnibox/cnibox/internal/fault"
	"github.com/cnibox/cnibox/roles/internal/delegate"
)

// Role is the "flannel" role, a drop-in for flannel's own CNI plugin: it
// builds a bridge + host-local delegate from flanneld's subnet.env, records
// it in the store and replays the record on DEL, CHECK and GC.
var Role = &cniplug.Role{
	Name: "flannel",
	About: "flannel reads the node's lease from flanneld's subnet.env (subnetFile, default " + FlannelSubnetFile +
		") and delegates to bridge with host-local IPAM on the node subnet, as flannel's own plugin does. " +
		"The delegate config is recorded in cnibox's store and replayed on DEL, so a DEL frees the pod's address " +
		"even when the record was lost (it is rebuilt from subnet.env). Where flannel's dataDir exists, its record " +
		"of each sandbox is kept too, so that either plugin deletes pods the other set up.",
	Verbs: &cniplug.ConfVerbs[cniplug.NoConf]{Add: flannelAdd, Del: flannelDel, Check: flannelCheck, GC: flannelGC, Status: flannelStatus},

	Known: &known,
}

const flannelPlugin = "flannel"

func flannelAdd(ctx context.Context, a *cniplug.Args, _ cniplug.NoConf) (types.Result, error) {
	c, err := parseFlannelConf(a)
	if err != nil {
		return nil, err
	}
	env, err := readFlannelEnv(c.subnetFile(a))
	if err != nil {
		return nil, flannelEnvErr(err, cniplug.CodeBusy)
	}
	typ, conf, err := c.delegate(env)
	if err != nil {
		return nil, err
	}
	// Recorded before the delegate runs: whatever it leaves behind, a DEL
	// finds the config that made it.
	rec := delegate.NewRecord(a, flannelPlugin, delegaterec.Delegate{Name: a.Conf.Name, IfName: a.IfName, Type: typ, Conf: conf})
	if err := delegate.PutRecord(a, "", rec); err != nil {
		return nil, err
	}
	sc, hasScratch := scratchOf(c.dataDir(a), a.ContainerID)
	if hasScratch {
		if err := sc.write(conf); err != nil {
			if derr := delegate.DeleteRecord(a, "", a.Conf.Name, a.ContainerID, a.IfName); derr != nil {
				delegate.Log(a, "flannel ADD: remove the delegate record after the failed ADD: %v", derr)
			}
			return nil, err
		}
	}
	fault.Point("flannel/add/after-record")
	res, err := a.DelegateAdd(ctx, typ, conf)
	if err != nil {
		// The delegate undid its own work; a record of nothing would only
		// mislead the CLI. A DEL without it rebuilds the delegate anyway.
		if derr := delegate.DeleteRecord(a, "", a.Conf.Name, a.ContainerID, a.IfName); derr != nil {
			delegate.Log(a, "flannel ADD: remove the delegate record after the failed ADD: %v", derr)
		}
		if hasScratch {
			if derr := sc.remove(); derr != nil {
				delegate.Log(a, "flannel ADD: %v after the failed ADD", derr)
			}
		}
		return nil, fmt.Errorf("flannel: delegate %s ADD: %w", typ, err)
	}
	fault.Point("flannel/add/after-delegate")
	return res, nil
}

// flannelEnvErr gives a subnet.env error its code: a missing file is
// notReady (11 on ADD and CHECK, 50 on STATUS); decode errors keep theirs.
func flannelEnvErr(err error, notReady uint) error {
	var missing *errNoSubnetFile
	if errors.As(err, &missing) {
		return cniplug.Errorf(notReady, "flannel: %w", err)
	}
	return err
}

// flannelDelegate returns the delegate config of this attachment: the
// record's, else flannel's own plugin's record of the sandbox (a pod it set
// up before the node moved to cnibox), else one built from the config and
// subnet.env. fromConfigOnly
// reports that neither record nor subnet.env existed and the delegate was
// built from the config alone (allowed for DEL only; other verbs get an
// error).
func flannelDelegate(a *cniplug.Args, allowConfigOnly bool) (typ string, conf []byte, found, fromConfigOnly bool, err error) {
	rec, found, err := delegate.GetRecord(a, "")
	if err != nil {
		return "", nil, false, false, err
	}
	if found && len(rec.Delegates) == 1 && rec.Delegates[0].Type != "" {
		return rec.Delegates[0].Type, rec.Delegates[0].Conf, true, false, nil
	}
	c, err := parseFlannelConf(a)
	if err != nil {
		return "", nil, found, false, err
	}
	if sc, ok := scratchOf(c.dataDir(a), a.ContainerID); ok && !found {
		typ, conf, ok, err := sc.read()
		if err != nil || ok {
			return typ, conf, false, false, err
		}
	}
	env, err := readFlannelEnv(c.subnetFile(a))
	if err != nil {
		if !allowConfigOnly {
			return "", nil, found, false, flannelEnvErr(err, cniplug.CodeBusy)
		}
		delegate.Log(a, "flannel %s: no delegate record for container %s ifname %s and %v; using a delegate built from the config alone (type, name, ipam type)", a.Command, a.ContainerID, a.IfName, err)
		env = nil
	}
	typ, conf, err = c.delegate(env)
	return typ, conf, found, env == nil, err
}

// withPrevResult passes the runtime's prevResult on to the delegate (DEL and
// CHECK), in the cniVersion of this call.
func withPrevResult(a *cniplug.Args, conf []byte) ([]byte, error) {
	prev := a.Conf.PluginConf.PrevResult // parsed by cniplug
	if prev == nil {
		return conf, nil
	}
	return delegate.Inject(conf, map[string]any{"prevResult": prev, "cniVersion": a.Conf.CNIVersion})
}

// flannelDel replays the recorded delegate; without a record, it rebuilds the
// delegate from subnet.env (or, if that is gone too, from the config alone:
// host-local releases by owner) so that the pod's address is freed.
func flannelDel(ctx context.Context, a *cniplug.Args, _ cniplug.NoConf) error {
	typ, conf, found, configOnly, err := flannelDelegate(a, true)
	if err != nil {
		if code := cniplug.CodeOf(err); !found && (code == types.ErrDecodingFailure || code == types.ErrInvalidNetworkConfig) {
			// No record and a config that ADD would have refused: this
			// config never set anything up.
			delegate.Log(a, "flannel DEL: no delegate record for container %s ifname %s, and %v: nothing to delete", a.ContainerID, a.IfName, err)
			return nil
		}
		return err
	}
	if conf, err = withPrevResult(a, conf); err != nil {
		return err
	}
	if err := a.DelegateDel(ctx, typ, conf); err != nil {
		code := cniplug.CodeOf(err)
		if configOnly && (code == types.ErrDecodingFailure || code == types.ErrInvalidNetworkConfig || code == types.ErrUnsupportedField) {
			// The config alone does not say enough for this delegate:
			// there is nothing more we can know.
			delegate.Log(a, "flannel DEL: delegate %s could not delete with a config built without subnet.env: %v; nothing more can be done for container %s", typ, err, a.ContainerID)
			return nil
		}
		return fmt.Errorf("flannel: delegate %s DEL: %w", typ, err)
	}
	fault.Point("flannel/del/after-delegate")
	if err := removeScratch(a); err != nil {
		return err
	}
	if found {
		if err := delegate.DeleteRecord(a, "", a.Conf.Name, a.ContainerID, a.IfName); err != nil {
			return err
		}
		fault.Point("flannel/del/after-record")
	}
	return nil
}

// flannelCheck runs CHECK of the delegate with the recorded config.
func flannelCheck(ctx context.Context, a *cniplug.Args, _ cniplug.NoConf) error {
	typ, conf, _, _, err := flannelDelegate(a, false)
	if err != nil {
		return err
	}
	if conf, err = withPrevResult(a, conf); err != nil {
		return err
	}
	if err := a.DelegateCheck(ctx, typ, conf); err != nil {
		return fmt.Errorf("flannel: delegate %s CHECK: %w", typ, err)
	}
	return nil
}

// flannelGC forwards GC with the valid list to the delegate built from
// subnet.env (or, without it, to the config of a record), then drops the
// records of attachments not in the list.
func flannelGC(ctx context.Context, a *cniplug.Args, _ cniplug.NoConf) error {
	c, err := parseFlannelConf(a)
	if err != nil {
		return err
	}
	recs, err := delegate.Records(a, "", a.Conf.Name, flannelPlugin)
	if err != nil {
		return err
	}
	var typ string
	var conf []byte
	env, err := readFlannelEnv(c.subnetFile(a))
	switch {
	case err == nil:
		typ, conf, err = c.delegate(env)
		if err != nil {
			return err
		}
	case errors.Is(err, fs.ErrNotExist):
		for _, r := range recs {
			if len(r.Delegates) == 1 && r.Delegates[0].Type != "" {
				typ, conf = r.Delegates[0].Type, r.Delegates[0].Conf
				break
			}
		}
		if conf == nil {
			delegate.Log(a, "flannel GC: %v, and no attachment of network %q is recorded: nothing to collect", err, a.Conf.Name)
			return nil
		}
	default:
		return err
	}
	inject := delegate.GCAttachments(a.Conf.GCKeep())
	inject["cniVersion"] = a.Conf.CNIVersion
	if conf, err = delegate.Inject(conf, inject); err != nil {
		return err
	}
	if err := a.DelegateGC(ctx, typ, conf); err != nil {
		return fmt.Errorf("flannel: delegate %s GC: %w", typ, err)
	}
	for _, r := range recs {
		if a.Conf.Keeps(r.ContainerID, r.IfName) {
			continue
		}
		if sc, ok := scratchOf(c.dataDir(a), r.ContainerID); ok {
			if err := sc.remove(); err != nil {
				return err
			}
		}
		if err := delegate.DeleteRecord(a, "", r.Network, r.ContainerID, r.IfName); err != nil {
			return err
		}
	}
	return nil
}

// removeScratch removes flannel's own record of the sandbox, if there is
// one, once the delegate's DEL succeeded (flannel's plugin removes it then
// too). A config that cannot be read has no dataDir to look in.
func removeScratch(a *cniplug.Args) error {
	c, err := parseFlannelConf(a)
	if err != nil {
		return nil
	}
	if sc, ok := scratchOf(c.dataDir(a), a.ContainerID); ok {
		return sc.remove()
	}
	return nil
}

// flannelStatus is not ready (50) until subnet.env exists; then it is the
// delegate's STATUS (host-local: are addresses left?).
func flannelStatus(ctx context.Context, a *cniplug.Args, _ cniplug.NoConf) error {
	c, err := parseFlannelConf(a)
	if err != nil {
		return err
	}
	env, err := readFlannelEnv(c.subnetFile(a))
	if err != nil {
		return flannelEnvErr(err, cniplug.CodeNotReady)
	}
	typ, conf, err := c.delegate(env)
	if err != nil {
		return err
	}
	return a.DelegateStatus(ctx, typ, conf)
}
