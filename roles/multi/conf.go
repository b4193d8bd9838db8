package multi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/netip"
	"path/filepath"
	"strings"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/utils"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/internal/delegaterec"
	"github.com/cnibox/cnibox/roles/internal/delegate"
)

// multiConf is the multi plugin's config.
type multiConf struct {
	// DataDir is where the delegate records are kept (see store.Dir).
	DataDir string
	// Delegates are the resolved networks, the primary first.
	Delegates []*multiDelegate
	// RuntimeConfig is this call's runtimeConfig, handed to the primary's
	// plugins by their capabilities.
	RuntimeConfig map[string]any
	// Multus are Multus' fields, with its defaults.
	Multus *multusConf
	// pendingCluster is a clusterNetwork name that only the pod path can
	// resolve (a NAD in multusNamespace first, then confDir).
	pendingCluster string
}

// multiDelegate is one network of a multi pod, resolved to a conflist.
type multiDelegate struct {
	Index  int
	Field  string // "delegates[1]", for messages
	Path   string // the file it came from, if any
	IfName string
	List   *libcni.NetworkConfigList
	// Status is the name network-status gives it ("namespace/name" for a
	// NAD); empty: the network's name.
	Status string
	// ResourceName is the NAD's k8s.v1.cni.cncf.io/resourceName;
	// DeviceID the device of it the kubelet gave the pod.
	ResourceName, DeviceID string
	// DevInfoFile is where the device's info is kept for network-status
	// (Multus' CNIDeviceInfoFile).
	DevInfoFile string
	// Gateways is the selection's default-route (nil: none asked);
	// Filter4/Filter6 say that this network's IPv4/IPv6 default route is
	// removed because another network asked for it.
	Gateways         *[]netip.Addr
	Filter4, Filter6 bool
}

// statusName is the network-status name of d.
func (d *multiDelegate) statusName() string {
	if d.Status != "" {
		return d.Status
	}
	return d.List.Name
}

// describe names the delegate in messages: index, network name, plugin types.
func (d *multiDelegate) describe() string {
	var types []string
	for _, p := range d.List.Plugins {
		types = append(types, p.Network.Type)
	}
	s := fmt.Sprintf("%s %q (type %s", d.Field, d.List.Name, strings.Join(types, "+"))
	if d.Path != "" {
		s += ", from " + d.Path
	}
	return s + ", ifname " + d.IfName + ")"
}

// maxDelegateFile bounds what is read of a delegate's conflist file.
const maxDelegateFile = cniplug.MaxConfigBytes

// parseMultiConf decodes the multi config and resolves every delegate. The
// primary gets ifname (CNI_IFNAME; "" for GC and STATUS), the others their
// own "ifname" field or net<index>.
func parseMultiConf(a *cniplug.Args, ifname string) (*multiConf, error) {
	var raw topJSON
	if err := cniplug.DecodeConf("multi config", a.StdinData, &raw); err != nil {
		return nil, err
	}
	m, err := parseMultus(a.StdinData)
	if err != nil {
		return nil, err
	}
	c := &multiConf{DataDir: raw.DataDir, RuntimeConfig: raw.RuntimeConfig, Multus: m}
	if m.ClusterNetwork != "" {
		// As Multus: clusterNetwork and delegates are exclusive, and
		// clusterNetwork wins.
		return c, c.resolveCluster(a, ifname)
	}
	if len(raw.Delegates) == 0 {
		return nil, cniplug.ConfError("delegates", "missing or empty, and no \"clusterNetwork\": list the pod's networks, the primary first (inline configs, conflists, or paths of conflist files), or name the primary network in \"clusterNetwork\"")
	}
	seen := map[string]string{}
	for i, r := range raw.Delegates {
		d, err := resolveDelegate(i, withName(r, a.Conf.Name), a.Conf.CNIVersion)
		if err != nil {
			return nil, err
		}
		if i == 0 {
			d.IfName = ifname // the primary is the runtime's interface
		}
		if d.IfName != "" {
			if prev, dup := seen[d.IfName]; dup {
				return nil, cniplug.ConfError(d.Field+".ifname", "%q is already the interface of %s: give each delegate its own", d.IfName, prev)
			}
			seen[d.IfName] = d.Field
		}
		c.Delegates = append(c.Delegates, d)
	}
	return c, nil
}

// withName gives an inline delegate without "name" the multi config's
// name: Multus' delegates need none (its docs' example has only "type").
func withName(raw json.RawMessage, name string) json.RawMessage {
	var obj map[string]json.RawMessage
	if json.Unmarshal(raw, &obj) != nil || obj == nil {
		return raw
	}
	if _, ok := obj["name"]; ok {
		return raw
	}
	obj["name"], _ = json.Marshal(name)
	b, _ := json.Marshal(obj)
	return b
}

// resolveDelegate turns one entry of "delegates" into a conflist: an inline
// conflist, an inline single-plugin config (made a one-plugin list, as
// libcni does), or a string naming a file with either.
func resolveDelegate(i int, raw json.RawMessage, version string) (*multiDelegate, error) {
	d := &multiDelegate{Index: i, Field: fmt.Sprintf("delegates[%d]", i)}
	body := []byte(raw)
	var path string
	if json.Unmarshal(raw, &path) == nil {
		if !filepath.IsAbs(path) {
			return nil, cniplug.ConfError(d.Field, "%q is not an absolute path: give the full path of a .conflist or .conf file", path)
		}
		var err error
		if body, err = delegateFile.Read(path); err != nil {
			return nil, cniplug.WithCode(types.ErrInvalidNetworkConfig, fmt.Errorf("config field %q: %w", d.Field, err))
		}
		d.Path = path
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(body, &obj); err != nil || obj == nil {
		if d.Path != "" {
			return nil, cniplug.Errorf(types.ErrDecodingFailure, "config field %q: %s is not a JSON network config or conflist: %v", d.Field, d.Path, err)
		}
		return nil, cniplug.ConfError(d.Field, "want an object (a network config or a conflist) or a string (the path of a conflist file), got %s", abbrev(raw))
	}
	if v, ok := obj["ifname"]; ok {
		if err := json.Unmarshal(v, &d.IfName); err != nil {
			return nil, cniplug.ConfError(d.Field+".ifname", "want a string, got %s", abbrev(v))
		}
		if err := utils.ValidateInterfaceName(d.IfName); err != nil {
			return nil, cniplug.ConfError(d.Field+".ifname", "%q is not a valid interface name: %s", d.IfName, err.Msg)
		}
		delete(obj, "ifname")
	} else {
		d.IfName = fmt.Sprintf("net%d", i)
	}
	if _, ok := obj["name"]; !ok {
		return nil, cniplug.ConfError(d.Field+".name", "missing: every delegate network needs a name of its own")
	}
	if _, isList := obj["plugins"]; !isList {
		single, _ := json.Marshal(obj)
		list := map[string]json.RawMessage{"plugins": json.RawMessage("[" + string(single) + "]")}
		for _, k := range []string{"name", "cniVersion"} {
			if v, ok := obj[k]; ok {
				list[k] = v
			}
		}
		obj = list
	}
	if _, ok := obj["cniVersion"]; !ok && version != "" {
		obj["cniVersion"], _ = json.Marshal(version)
	}
	listBytes, _ := json.Marshal(obj)
	list, err := libcni.NetworkConfFromBytes(listBytes)
	if err != nil {
		return nil, cniplug.ConfError(d.Field, "%v", err)
	}
	if err := utils.ValidateNetworkName(list.Name); err != nil {
		return nil, cniplug.ConfError(d.Field+".name", "%q: %s (every delegate network needs a name of its own)", list.Name, err.Msg)
	}
	for j, p := range list.Plugins {
		if isMultiType(p.Network.Type) {
			return nil, cniplug.ConfError(fmt.Sprintf("%s.plugins[%d].type", d.Field, j), "a multi delegate cannot itself be multi: list its networks here instead")
		}
	}
	d.List = list
	return d, nil
}

// delegateFile is a delegate's conflist file.
var delegateFile = delegate.File{IsNot: "a network config", Max: maxDelegateFile, Missing: func(path string) error {
	return fmt.Errorf("%s does not exist: create it or fix the path", path)
}}

// abbrev shortens raw JSON for a message.
func abbrev(b []byte) string {
	b = bytes.TrimSpace(b)
	if len(b) > 60 {
		return string(b[:57]) + "..."
	}
	return string(b)
}

// record is the delegate record of the call's attachment with c's delegates
// (their results are filled in once every ADD is done); delegatesFromRecord
// turns it back into the delegates.
func (c *multiConf) record(a *cniplug.Args) delegaterec.Record {
	ds := make([]delegaterec.Delegate, len(c.Delegates))
	for i, d := range c.Delegates {
		ds[i] = delegaterec.Delegate{Name: d.List.Name, IfName: d.IfName, Conf: d.List.Bytes}
	}
	return delegate.NewRecord(a, multiPlugin, ds...)
}

// delegatesFromRecord rebuilds the delegate list of a record.
func delegatesFromRecord(rec delegaterec.Record) ([]*multiDelegate, error) {
	var out []*multiDelegate
	for i, rd := range rec.Delegates {
		list, err := libcni.NetworkConfFromBytes(rd.Conf)
		if err != nil {
			return nil, cniplug.Errorf(types.ErrDecodingFailure, "the store's record of container %s ifname %s: delegate %d: %v", rec.ContainerID, rec.IfName, i, err)
		}
		out = append(out, &multiDelegate{Index: i, Field: fmt.Sprintf("delegates[%d]", i), IfName: rd.IfName, List: list})
	}
	return out, nil
}
