package cniplug

import (
	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/containernetworking/cni/pkg/types"
)

// RequirePrevResult returns the config's prevResult for a role that cannot
// work without one (a chained plugin's ADD, any CHECK), or the config error
// (7) that says where it should have come from.
func (a *Args) RequirePrevResult() (*current.Result, error) {
	prev, err := a.Conf.PrevResult()
	if err != nil || prev != nil {
		return prev, err
	}
	if a.Command == "CHECK" {
		return nil, Errorf(types.ErrInvalidNetworkConfig, "CHECK needs the ADD result in \"prevResult\"; the runtime sent none")
	}
	return nil, Errorf(types.ErrInvalidNetworkConfig, "%s is a chained plugin and got no \"prevResult\": put it after a main plugin (e.g. bridge) in a conflist", a.Conf.Type)
}
