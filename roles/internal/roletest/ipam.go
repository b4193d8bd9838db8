package roletest

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/store"
)

// EnvRefDataDir is hostlocal.EnvRefDataDir (a role's package is not
// imported here): where host-local looks for the reference host-local's
// records when the config has no dataDir. Every node of the tests points it
// into its own directory, never at the machine's /var/lib/cni/networks
// (root's alone, 0700, wherever containerd, CRI-O or root podman ran).
const EnvRefDataDir = "CNIBOX_HOSTLOCAL_DATA_DIR"

// RefDataDir is the reference host-local's records directory of a node
// whose store is in dir: it does not exist (the node never ran the
// reference) unless a test makes it.
func RefDataDir(dir string) string { return filepath.Join(dir, "reference-host-local") }

// IPAMNode is a store directory that the calls of an IPAM role share. An
// IPAM role touches no namespace: CNI_NETNS names one that does not exist
// and the node needs no root.
type IPAMNode struct {
	T   testing.TB
	Dir string
	Reg *cniplug.Registry
}

// NewIPAMNode returns a node with an empty store that answers as roles.
func NewIPAMNode(t testing.TB, roles ...*cniplug.Role) *IPAMNode {
	t.Helper()
	return &IPAMNode{T: t, Dir: t.TempDir(), Reg: cniplug.NewRegistry(roles...)}
}

// Call runs one CNI call of role for container cid with stdin conf and
// returns its stdout; extra overrides the environment.
func (n *IPAMNode) Call(role *cniplug.Role, cmd, cid, conf string, extra map[string]string) ([]byte, error) {
	e := map[string]string{
		"CNI_COMMAND":     cmd,
		"CNI_CONTAINERID": cid,
		"CNI_NETNS":       "/var/run/netns/" + cid,
		"CNI_IFNAME":      "eth0",
		"CNI_PATH":        "/opt/cni/bin",
		store.EnvDataDir:  n.Dir,
		EnvRefDataDir:     RefDataDir(n.Dir),
	}
	for k, v := range extra {
		e[k] = v
	}
	var stderr bytes.Buffer
	return cniplug.Invoke(context.Background(), role, cniplug.Invocation{
		Getenv:   func(k string) string { return e[k] },
		Stdin:    strings.NewReader(conf),
		Stderr:   &stderr,
		Registry: n.Reg,
	})
}

// Must is Call that fails the test on an error.
func (n *IPAMNode) Must(role *cniplug.Role, cmd, cid, conf string, extra map[string]string) []byte {
	n.T.Helper()
	out, err := n.Call(role, cmd, cid, conf, extra)
	if err != nil {
		n.T.Fatalf("%s %s %s: %v", role.Name, cmd, cid, err)
	}
	return out
}

// Reserved returns container ID -> addresses of network in the store.
func (n *IPAMNode) Reserved(network string) map[string][]string {
	n.T.Helper()
	s, err := store.Open(n.Dir)
	if err != nil {
		n.T.Fatal(err)
	}
	defer s.Close()
	out := map[string][]string{}
	s.ViewIPAM(network, func(tx *store.IPAMTx) error {
		for _, r := range tx.All() {
			out[r.ContainerID] = append(out[r.ContainerID], r.Addr.String())
		}
		return nil
	})
	return out
}

// IPAMConf builds the config of network mynet around an ipam section; top
// are more top-level fields (`"key":value`).
func IPAMConf(version, ipamJSON string, top ...string) string {
	extra := ""
	for _, t := range top {
		extra += "," + t
	}
	return `{"cniVersion":"` + version + `","name":"mynet","type":"bridge","ipam":` + ipamJSON + extra + `}`
}

// IPAMResult is the part of an IPAM role's ADD result the tests look at,
// any version.
type IPAMResult struct {
	CNIVersion string `json:"cniVersion"`
	IPs        []struct {
		Version   string `json:"version"`
		Address   string `json:"address"`
		Gateway   string `json:"gateway"`
		Interface *int   `json:"interface"`
	} `json:"ips"`
	Routes []struct {
		Dst string `json:"dst"`
		GW  string `json:"gw"`
	} `json:"routes"`
	DNS struct {
		Nameservers []string `json:"nameservers"`
		Domain      string   `json:"domain"`
		Search      []string `json:"search"`
		Options     []string `json:"options"`
	} `json:"dns"`
}

// ParseIPAM decodes an ADD result of any version.
func ParseIPAM(t testing.TB, out []byte) IPAMResult {
	t.Helper()
	var r IPAMResult
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("result %s: %v", out, err)
	}
	return r
}

// Addrs lists the result's addresses in order.
func (r IPAMResult) Addrs() []string {
	var s []string
	for _, ip := range r.IPs {
		s = append(s, ip.Address)
	}
	return s
}

// CheckErr fails the test unless err has CNI code code and a message with
// every one of words.
func CheckErr(t testing.TB, err error, code uint, words ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want code %d", code)
	}
	if got := cniplug.CodeOf(err); got != code {
		t.Errorf("code %d, want %d (%v)", got, code, err)
	}
	for _, w := range words {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("message %q lacks %q", err, w)
		}
	}
}

// ConfigCode fails the test unless err has a config code: decoding
// failure (6), invalid config (7) or unsupported field (2). It is for the
// fuzz targets of the roles' config parsers.
func ConfigCode(t testing.TB, err error) {
	t.Helper()
	switch code := cniplug.CodeOf(err); code {
	case types.ErrDecodingFailure, types.ErrInvalidNetworkConfig, types.ErrUnsupportedField:
	default:
		t.Fatalf("code %d: %v", code, err)
	}
}

// ArgsFor builds the Args an ADD would have for stdin, or nil when stdin
// is not a config cniplug accepts (cniplug's own fuzz target covers that).
func ArgsFor(stdin []byte) *cniplug.Args {
	conf := &cniplug.NetConf{}
	if json.Unmarshal(stdin, conf) != nil {
		return nil
	}
	return &cniplug.Args{Command: "ADD", ContainerID: "c", IfName: "eth0", StdinData: stdin, Conf: conf,
		Getenv: func(string) string { return "" }}
}
