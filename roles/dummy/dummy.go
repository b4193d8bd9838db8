// Package dummy is the "dummy" main plugin: a dummy device (no master, no
// peer: it only holds addresses) created in the pod as CNI_IFNAME, with the
// addresses and routes from IPAM, which it requires. Pods use it for
// service or anycast addresses, and VM-in-pod runtimes for an interface
// that carries an address but no traffic.
//
// It is the masterless device kind of roles/internal/lower (Spec.AddBare).
package dummy

import (
	"context"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/roles/internal/attach"
	"github.com/cnibox/cnibox/roles/internal/lower"
)

// spec is the dummy device kind: no modes (netops reports "" for it).
var spec = lower.Spec{
	Kind:  "dummy",
	Modes: []string{""},
	Create: func(pod *netops.Handle, o netops.SubLinkOpts) (netops.SubLink, error) {
		l, err := pod.EnsureDummy(o.Name)
		return netops.SubLink{Link: l}, err
	},
}

// Role is the "dummy" role.
var Role = &cniplug.Role{
	Name: "dummy",
	About: "dummy puts a dummy interface into the pod as CNI_IFNAME with the addresses and routes " +
		"from the ipam section (required): an interface that holds addresses (service or anycast addresses, a " +
		"VM-in-pod's interface) and carries no traffic.",
	Verbs: &cniplug.ConfVerbs[*lower.Conf]{Parse: parse, Add: add, Check: check,
		ParseDel: parseLower, Del: lower.Del, ParseGC: parseLower, GC: lower.GC,
		ParseStatus: cniplug.Unparsed[*lower.Conf], Status: attach.Status[*lower.Conf]},
	Known: &known,
}

// add and check are lower's for a masterless kind.
func add(ctx context.Context, a *cniplug.Args, c *lower.Conf) (types.Result, error) {
	return spec.AddBare(ctx, a, c)
}

func check(ctx context.Context, a *cniplug.Args, c *lower.Conf) error {
	return spec.CheckBare(ctx, a, c)
}

// parseLower reads lower's fields: the parse of DEL and GC, which need no
// ipam section.
func parseLower(a *cniplug.Args) (*lower.Conf, error) { return spec.ParseConf(a) }

// parse reads lower's fields once need has passed.
func parse(a *cniplug.Args) (*lower.Conf, error) {
	if err := need(a); err != nil {
		return nil, err
	}
	return spec.ParseConf(a)
}

// need checks what dummy requires beyond lower's fields: an ipam section,
// as the reference requires on ADD and CHECK, and no "mode".
func need(a *cniplug.Args) error {
	var raw struct {
		Mode string `json:"mode"`
	}
	if err := cniplug.DecodeConf("dummy config", a.StdinData, &raw); err != nil {
		return err
	}
	if raw.Mode != "" {
		return cniplug.Errorf(types.ErrUnsupportedField, "config field \"mode\" %q: a dummy device has no mode: drop \"mode\"", raw.Mode)
	}
	if a.Conf.IPAM.Type == "" {
		return cniplug.ConfError("ipam", "missing: a dummy interface has nothing but the addresses IPAM gives it: add an \"ipam\" section (e.g. {\"type\": \"host-local\", \"ranges\": [[{\"subnet\": \"10.1.2.0/24\"}]]})")
	}
	return nil
}
