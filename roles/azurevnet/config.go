package azurevnet

import (
	"encoding/json"
	"strings"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/roles/bridge"
)

// conf is azure-vnet's own part of the config.
type conf struct {
	Mode   string `json:"mode"`
	Master string `json:"master"`
}

func fields(a *cniplug.Args) (conf, error) {
	var z conf
	if err := json.Unmarshal(a.StdinData, &z); err != nil {
		return z, cniplug.Errorf(types.ErrDecodingFailure, "azure-vnet config: %v", err)
	}
	return z, nil
}

// parse accepts bridge mode only. The gateway lives in the fabric, so
// isGateway and isDefaultGateway are ignored (the default route comes from
// IPAM).
func parse(a *cniplug.Args, c *bridge.Conf) error {
	z, err := fields(a)
	if err != nil {
		return err
	}
	if m := strings.ToLower(z.Mode); m != "" && m != "bridge" {
		return cniplug.Errorf(types.ErrUnsupportedField, "config field \"mode\": %q is not supported by cnibox's azure-vnet, which only does \"bridge\" mode: set \"mode\": \"bridge\"", z.Mode)
	}
	if z.Master != "" {
		if err := checkName("master", z.Master); err != nil {
			return err
		}
	}
	c.IsGateway, c.IsDefaultGW = false, false
	return nil
}

func checkName(field, name string) error {
	if len(name) > 15 || strings.ContainsAny(name, "/: \t\n") {
		return cniplug.ConfError(field, "%q is not a valid interface name", name)
	}
	return nil
}
