package cniplug

import (
	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/utils"
)

// ConfigParser is a Verbs that parses a config without running a verb: the
// parser its ADD runs. `cnibox check` calls it, so check and ADD never
// disagree about a config.
type ConfigParser interface {
	ParseConfig(*Args) error
}

// ParseConfig runs the role's own parser on a.StdinData (a.Conf decoded):
// Known.Parse when the role declares one, else its Verbs' when they are a
// ConfigParser; a role with neither has no config of its own (nil).
func (r *Role) ParseConfig(a *Args) error {
	if r.Known != nil && r.Known.Parse != nil {
		return r.Known.Parse(a)
	}
	if p, ok := r.Verbs.(ConfigParser); ok {
		return p.ParseConfig(a)
	}
	return nil
}

// ParseConfig is the parse of ADD.
func (v *ConfVerbs[C]) ParseConfig(a *Args) error {
	if v.Parse == nil {
		return nil
	}
	_, err := v.Parse(a)
	return err
}

// CheckConfig parses stdin as role's ADD would, without running it: the
// checks every call makes (size, JSON, name, cniVersion) and the role's own
// parser (Role.ParseConfig). a carries the rest of the call (ContainerID,
// IfName, Path, Registry ...); its Command is "ADD".
func CheckConfig(role *Role, a *Args, stdin []byte) error {
	if len(stdin) > MaxConfigBytes {
		return Errorf(types.ErrDecodingFailure, "stdin: the network config is %d bytes, larger than the %d a plugin reads: make it smaller (move large data, such as address pools, to a file the config names)", len(stdin), MaxConfigBytes)
	}
	a.Command = "ADD"
	a.StdinData = stdin
	conf, err := decodeConf(stdin)
	if err != nil {
		return err
	}
	a.Conf = conf
	if err := utils.ValidateNetworkName(conf.Name); err != nil {
		return Errorf(types.ErrInvalidNetworkConfig, "config field \"name\" %q: %s", conf.Name, err.Msg)
	}
	if err := checkVersion("ADD", conf.CNIVersion); err != nil {
		return err
	}
	return role.ParseConfig(a)
}
