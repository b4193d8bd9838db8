package multi

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/roles/internal/delegate"
)

// passthruPlugin is the type of Multus' auxiliary chain's first plugin: it
// returns an empty result for the chain's plugins to work on.
const passthruPlugin = "passthru"

// resolveCluster makes clusterNetwork the primary delegate (interface
// ifname). A path is read now; a name is a NAD first, so with the pod path
// on and a pod in CNI_ARGS it waits for the agent (pendingCluster), and is
// otherwise the confDir file of that network name. GC and STATUS (ifname
// "") skip a primary they cannot resolve without the agent.
func (c *multiConf) resolveCluster(a *cniplug.Args, ifname string) error {
	m := c.Multus
	k, err := parseMultiK8s(a.StdinData)
	if err != nil {
		return err
	}
	if !strings.Contains(m.ClusterNetwork, "/") && k.enabled() && a.CNIArgs.K8S_POD_NAMESPACE != "" && a.CNIArgs.K8S_POD_NAME != "" {
		c.pendingCluster = m.ClusterNetwork
		return nil
	}
	ref, err := resolveRef(context.Background(), nil, m, k.ConfDir, m.ClusterNetwork)
	if err != nil {
		if ifname == "" {
			delegate.Log(a, "multi: clusterNetwork %q not resolved without the agent, skipped: %v", m.ClusterNetwork, err)
			return nil
		}
		return fmt.Errorf("clusterNetwork: %w", err)
	}
	d, err := ref.delegate("clusterNetwork", 0, "", a.Conf.CNIVersion)
	if err != nil {
		return err
	}
	d.IfName = ifname
	c.Delegates = []*multiDelegate{d}
	return nil
}

// appendAux adds the auxiliaryCNIChainName network after the others, as
// Multus does: the plugin files in <directory of clusterNetwork>/<name>/,
// after a passthru plugin, as one network on interface net<index>; no
// files, no network.
func (c *multiConf) appendAux(version string) error {
	m := c.Multus
	if m == nil || m.AuxiliaryCNIChainName == "" {
		return nil
	}
	name := m.AuxiliaryCNIChainName
	dir := filepath.Dir(hostPath(m.ClusterNetwork))
	plugins, err := libcni.NetworkPluginConfsFromFiles(dir, name)
	if err != nil {
		return cniplug.Errorf(types.ErrInvalidNetworkConfig, "auxiliaryCNIChainName %q: the plugin files in %s: %v", name, filepath.Join(dir, name), err)
	}
	if len(plugins) == 0 {
		return nil
	}
	list := []json.RawMessage{json.RawMessage(`{"type":"` + passthruPlugin + `","name":"passthru-cni"}`)}
	for _, p := range plugins {
		list = append(list, p.Bytes)
	}
	pl, _ := json.Marshal(list)
	body, _ := json.Marshal(map[string]json.RawMessage{"name": mustJSON(name), "cniVersion": mustJSON(version), "plugins": pl})
	i := len(c.Delegates)
	d, err := resolveDelegate(i, body, version)
	if err != nil {
		return fmt.Errorf("auxiliaryCNIChainName %q: %w", name, err)
	}
	d.Field = "auxiliaryCNIChainName " + name
	c.Delegates = append(c.Delegates, d)
	return nil
}

func mustJSON(v any) json.RawMessage {
	b, _ := json.Marshal(v)
	return b
}
