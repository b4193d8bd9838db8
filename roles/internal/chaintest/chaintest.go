// Package chaintest runs the tuning and bandwidth roles after bridge +
// host-local in process against a real kernel and a store in a temporary
// directory, for their tests: a roletest node with one bridge network.
// Only _test.go files import it.
package chaintest

import (
	"encoding/json"
	"fmt"
	"maps"
	"path/filepath"
	"testing"

	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/roles/bandwidth"
	"github.com/cnibox/cnibox/roles/bridge"
	"github.com/cnibox/cnibox/roles/hostlocal"
	"github.com/cnibox/cnibox/roles/internal/roletest"
	"github.com/cnibox/cnibox/roles/tuning"
)

// Registry is the roles a chain of the tests can name.
var Registry = cniplug.NewRegistry(bridge.Role, hostlocal.Role, tuning.Role, bandwidth.Role)

// Versions are the spec versions every role speaks.
var Versions = roletest.Versions

// Node is the test's node (the test process's private namespace) with a
// store directory and one bridge network. Its Env points
// CNIBOX_TUNING_ALLOWLIST at a missing file.
type Node struct {
	*roletest.Node
	Network string
	Bridge  string
	Subnet  string
}

// Pod is a pod: container ID and netns.
type Pod = roletest.Pod

var bridgeSeq int

// NewNode returns a node with an empty store and a bridge network of its
// own, which the test removes at its end; it skips the test without root.
func NewNode(t *testing.T) *Node {
	t.Helper()
	bridgeSeq++
	n := &Node{Node: roletest.NewNodeWith(t, Registry), Network: "tbnet",
		Bridge: fmt.Sprintf("cbxtb%d", bridgeSeq), Subnet: fmt.Sprintf("10.78.%d.0/24", bridgeSeq)}
	n.Env[tuning.TuningAllowlistEnv] = filepath.Join(n.Dir, "no-allowlist.conf")
	t.Cleanup(func() {
		host, err := netops.Open("")
		if err == nil {
			host.DeleteLink(n.Bridge)
			host.Close()
		}
	})
	return n
}

// BridgeConf is the main plugin's config of the node's network.
func (n *Node) BridgeConf(version string) []byte {
	return []byte(fmt.Sprintf(`{"cniVersion":%q,"name":%q,"type":"bridge","bridge":%q,"isGateway":true,
		"ipam":{"type":"host-local","ranges":[[{"subnet":%q}]]}}`, version, n.Network, n.Bridge, n.Subnet))
}

// Conf builds a chained plugin's config: name, cniVersion and type, then
// fields, then (when prev is not nil) prevResult.
func (n *Node) Conf(version, typ string, fields map[string]any, prev []byte) []byte {
	n.T.Helper()
	head := fmt.Appendf(nil, `{"cniVersion":%q,"name":%q,"type":%q}`, version, n.Network, typ)
	all := map[string]any{}
	maps.Copy(all, fields)
	if prev != nil {
		all["prevResult"] = json.RawMessage(prev)
	}
	return roletest.With(n.T, head, all)
}

// WithKeep adds GC's valid attachments (eth0 of each pod) to conf.
func (n *Node) WithKeep(conf []byte, keep ...Pod) []byte {
	n.T.Helper()
	return roletest.WithKeep(n.T, conf, keep...)
}

// Result decodes an ADD result of the given version.
func Result(t *testing.T, out []byte, v string) *current.Result {
	t.Helper()
	return roletest.Result(t, out, v)
}

// Link returns the settings of a link, or fails the test.
func Link(t *testing.T, ns, name string) netops.LinkSettings {
	t.Helper()
	return roletest.InNS(t, ns, func(h *netops.Handle) (netops.LinkSettings, error) { return h.LinkSettings(name) })
}

// Sysctl reads a sysctl in a namespace.
func Sysctl(t *testing.T, ns, key string) string {
	t.Helper()
	return roletest.InNS(t, ns, func(h *netops.Handle) (string, error) { return h.Sysctl(key) })
}

// Code returns the CNI code of err (0 for nil).
func Code(err error) uint { return roletest.Code(err) }
