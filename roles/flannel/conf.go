package flannel

import (
	"bytes"
	"encoding/json"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/cnibox/cnibox/cniplug"
)

// flannelConf is the flannel plugin's config, field names as in flannel's own
// CNI plugin.
type flannelConf struct {
	Name       string `json:"name"`
	CNIVersion string `json:"cniVersion"`
	// SubnetFile is flanneld's lease file (default FlannelSubnetFile, or
	// $CNIBOX_FLANNEL_SUBNET_FILE).
	SubnetFile string `json:"subnetFile"`
	// DataDir is where flannel's own plugin keeps its delegate records
	// (default FlannelDataDir). cnibox keeps its record in its store and,
	// where this directory exists, flannel's beside it (scratch.go).
	DataDir       string         `json:"dataDir"`
	Delegate      map[string]any `json:"delegate"`
	IPAM          map[string]any `json:"ipam"`
	RuntimeConfig map[string]any `json:"runtimeConfig"`
}

// parseFlannelConf decodes and checks the flannel fields of stdin.
func parseFlannelConf(a *cniplug.Args) (*flannelConf, error) {
	c := &flannelConf{}
	dec := json.NewDecoder(bytes.NewReader(a.StdinData))
	dec.UseNumber() // numbers reach the delegate as written
	if err := dec.Decode(c); err != nil {
		return nil, cniplug.DecodeError("flannel config", a.StdinData, c, err)
	}
	if t, ok := c.Delegate["type"]; ok {
		if s, isStr := t.(string); !isStr || s == "" {
			return nil, cniplug.ConfError("delegate.type", "%v is not a plugin type: give a string such as \"bridge\", or leave it out for bridge", t)
		}
	}
	if _, ok := c.Delegate["name"]; ok {
		return nil, cniplug.ConfError("delegate.name", "must not be set: flannel gives the delegate the network's name; remove it")
	}
	if _, ok := c.Delegate["ipam"]; ok {
		return nil, cniplug.ConfError("delegate.ipam", "must not be set: flannel builds the delegate's IPAM from subnet.env; put IPAM settings in the top-level \"ipam\" section instead")
	}
	if t, ok := c.IPAM["type"]; ok {
		if s, isStr := t.(string); !isStr || s == "" {
			return nil, cniplug.ConfError("ipam.type", "%v is not a plugin type: give a string such as \"host-local\", or leave it out for host-local", t)
		}
	}
	if r, ok := c.IPAM["routes"]; ok {
		if _, isList := r.([]any); !isList {
			return nil, cniplug.ConfError("ipam.routes", "want a list of {\"dst\": CIDR, \"gw\": IP}, got %v", r)
		}
	}
	return c, nil
}

// subnetFile is the path of subnet.env for this call.
func (c *flannelConf) subnetFile(a *cniplug.Args) string {
	return a.Setting(c.SubnetFile, EnvFlannelSubnetFile, FlannelSubnetFile)
}

// delegate builds the delegate's config the way flannel's plugin does: the
// "delegate" section, then name, type (default bridge), ipMasq (default: not
// FLANNEL_IPMASQ), mtu (default FLANNEL_MTU), isGateway (bridge only, default
// true) and cniVersion; IPAM is the "ipam" section with type (default
// host-local), ranges = the node subnet(s) and routes = ipam.routes plus the
// cluster network(s). With env nil (no subnet.env) the ranges, routes and
// mtu are left out and ipMasq defaults to true, which is enough for DEL:
// host-local releases by owner and bridge removes what masquerade entries
// exist.
func (c *flannelConf) delegate(env *flannelEnv) (typ string, conf []byte, err error) {
	d := make(map[string]any, len(c.Delegate)+8)
	for k, v := range c.Delegate {
		d[k] = v
	}
	if c.RuntimeConfig != nil {
		d["runtimeConfig"] = c.RuntimeConfig
	}
	d["name"] = c.Name
	if _, ok := d["type"]; !ok {
		d["type"] = "bridge"
	}
	typ = d["type"].(string)
	if _, ok := d["ipMasq"]; !ok {
		d["ipMasq"] = env == nil || !env.ipMasq
	}
	if _, ok := d["mtu"]; !ok && env != nil {
		d["mtu"] = env.mtu
	}
	if _, ok := d["isGateway"]; !ok && typ == "bridge" {
		d["isGateway"] = true
	}
	if c.CNIVersion != "" {
		d["cniVersion"] = c.CNIVersion
	}

	ipam := make(map[string]any, len(c.IPAM)+3)
	for k, v := range c.IPAM {
		ipam[k] = v
	}
	if _, ok := ipam["type"]; !ok {
		ipam["type"] = "host-local"
	}
	if env != nil {
		var ranges [][]map[string]string
		if env.subnet4.IsValid() {
			ranges = append(ranges, []map[string]string{{"subnet": env.subnet4.String()}})
		}
		if env.subnet6.IsValid() {
			ranges = append(ranges, []map[string]string{{"subnet": env.subnet6.String()}})
		}
		ipam["ranges"] = ranges
		routes, _ := ipam["routes"].([]any)
		routes = append([]any(nil), routes...)
		for _, nw := range env.networks {
			routes = append(routes, map[string]string{"dst": nw.String()})
		}
		ipam["routes"] = routes
	}
	d["ipam"] = ipam

	conf, err = json.Marshal(d)
	if err != nil {
		return "", nil, cniplug.Errorf(types.ErrInvalidNetworkConfig, "flannel: encode the delegate config: %w", err)
	}
	return typ, conf, nil
}
