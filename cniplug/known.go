package cniplug

import (
	"crypto/sha256"
	"encoding/hex"
	"net/netip"

	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/store"
)

// Known is what a role declares about itself for the node's tools: the
// fields of its config (`cnibox check`), its host-side devices and how its
// attachments are found again (`cnibox gc`, `cnibox store rebuild`), the
// records it keeps and what goes with them (Leftovers: `cnibox gc`), what
// `cnibox doctor` checks of its endpoints and of the node, including what
// it changes on purpose, and what it adds to `cnibox inspect` and `cnibox
// install` (known_cli.go). store, nodestate and cli ask the registry's
// roles (Registry.Known) and name no role (TestToolsNameNoRole), so a new
// role is one folder and a line in roles/registry.go. Like Role, a Known is package-level data: constants,
// names of functions, addresses of composite literals, nil pointers of a
// type (TestNoInitCode). Every field is optional.
type Known struct {
	// Config are nil pointers to the structs the role's parser decodes its
	// config into ((*Conf)(nil)); an IPAM role's are of its "ipam"
	// section. `cnibox check` knows the fields of their json tags, and a
	// test holds them equal to the field table of docs/roles/<Doc>.md.
	Config []any
	// Doc is the role's page under docs/roles ("" = the role's name).
	Doc string
	// Parse is the role's own parser, the one its ADD runs, for a role
	// whose Verbs is no ConfigParser (see Role.ParseConfig).
	Parse func(*Args) error
	// Capabilities are the runtime capabilities the role reads from
	// runtimeConfig: without the plugin's "capabilities" naming one the
	// runtime passes none of it (`cnibox check` warns).
	Capabilities []Capability
	// NodeLinks are the config fields that name an interface of the node
	// that the role's ADD needs there (`cnibox check --node` looks).
	NodeLinks []NodeLink
	// NodeFiles are the config fields that name a file or a socket of the
	// node that the role's ADD needs there (`cnibox check --node` looks).
	NodeFiles []NodeFile
	// Kernel are what the role's ADD needs of the node's kernel (`cnibox
	// check --node` looks, reading what the kernel says of itself).
	Kernel []KernelFeature

	// HostVeth are the host ends of the role's veth pairs.
	HostVeth *HostVeth
	// PodDevice is set by a role whose pod interface is a device (no host
	// veth): what doctor and store rebuild expect of it.
	PodDevice *PodDevice
	// Leftovers are the role's records and what goes with them, for
	// `cnibox gc` and doctor.
	Leftovers *Leftovers
	// StoreIPAM is set by an IPAM role whose reservations are the store's
	// by the pod's address alone (host-local): store rebuild reserves the
	// addresses it finds in a pod of a network that uses it.
	StoreIPAM bool

	// Doctor adds the role's checks of an endpoint (every role's hook runs
	// for every endpoint: a chained role finds its own records) and says
	// what it changed on purpose (EndpointCheck.Tables, .MTUSetBy).
	Doctor func(*EndpointCheck)
	// DoctorHost checks the node's side of an endpoint the role made
	// (instead of doctor's veth-on-a-bridge and routed-veth checks) and
	// returns the host end's MTU; ok false = not the role's layout.
	DoctorHost func(*EndpointCheck) (hostMTU int, ok bool)
	// DoctorForwards checks what the node forwards to the endpoint from
	// outside (its port mappings); it runs after doctor's own masquerade
	// check, with the store open.
	DoctorForwards func(*EndpointCheck)
	// DoctorGateway stands for the ping of the endpoint's gateways when
	// nothing answers one (a virtual gateway); ok false = ping as usual.
	DoctorGateway func(*EndpointCheck) (ok bool)
	// Describe is one line on the layout of an endpoint of the role, for
	// `cnibox inspect endpoints --detail` ("" = nothing to add).
	Describe func(store.Endpoint) string

	// Inspect are `cnibox inspect` commands that list what the role keeps.
	Inspect []InspectCommand
	// DoctorNode adds the role's checks of the node (known_cli.go).
	DoctorNode func(*NodeCheck)
	// Companions are binaries of the role that `cnibox install` copies
	// into the bin dir when they sit next to the binary it copies (a
	// daemon the role execs from beside cnibox).
	Companions []string
	// WrapConflist wraps a whole conflist in the role, for `cnibox install
	// --secondary-networks`: the list stays the pod network and the role
	// adds the networks a pod asks for.
	WrapConflist func(conflist []byte) ([]byte, error)
	// KeptPools are the address pools the role keeps beside a network's
	// reservations (store.IPAMView.Kept: "bucket/key" -> value), for
	// `cnibox inspect ipam`.
	KeptPools func(kept map[string][]byte) []KeptPool
	// AgentSocket returns, for an IPAM role whose ADD asks cnibox-agent,
	// the agent's socket a config (the plugin's JSON) names; ok false =
	// the config is not the role's.
	AgentSocket func(conf []byte) (socket string, ok bool)
}

// HostVeth says how a role names the host ends of its veth pairs and how
// store rebuild files the networks that use them.
type HostVeth struct {
	// Prefix starts every name: prefix + 12 hex digits of the attachment
	// (VethName).
	Prefix string
	// Plugin is the role recorded for a veth on a bridge.
	Plugin string
	// Routed is the role recorded for a veth on no bridge whose peer's
	// addresses the node routes to it ("" = such a veth is not the role's).
	Routed string
	// RoutedKey files the networks of Routed in NetworkKey's map.
	RoutedKey string
	// Unbridged fills in what a routed veth's layout implies (gateways,
	// routes, extra facts); nil = the host end's addresses are the pod's
	// gateways (ptp).
	Unbridged func(pod []netip.Prefix) (gateways []netip.Addr, routes []store.Route, extra map[string]string)
	// NetworkKey returns the key a network config of plugin typ (the
	// plugin's JSON) is filed under: its bridge's name, or RoutedKey;
	// ok false = not a config of this layout.
	NetworkKey func(typ string, conf []byte) (key string, ok bool)
}

// Name returns the host end's name for an attachment.
func (v *HostVeth) Name(containerID, ifname string) string {
	return VethName(v.Prefix, containerID, ifname)
}

// Is reports whether a link name has the shape of v's names.
func (v *HostVeth) Is(name string) bool { return IsDeviceName(v.Prefix, name) }

// Where the gateway of a device attachment is, which says what one that
// does not answer a ping means.
const (
	GatewayOnNode  = iota // the bridge or the host veth: a fault of this node
	GatewayOffNode        // a router of the master's LAN: maybe not this node's fault
	GatewayNowhere        // nothing answers (dummy, tap): not pinged
)

// PodDevice is what a device role leaves in the pod.
type PodDevice struct {
	// Link is the pod interface's link kind ("" = ExtraKind's, or any).
	Link string
	// ExtraKind names the endpoint record's Extra key holding the link
	// kind when it varies (host-device: "kind").
	ExtraKind string
	// Gateway is GatewayOffNode or GatewayNowhere.
	Gateway int
	// Facts are the fields of the cached config that store rebuild keeps
	// in the endpoint record's Extra ("master", "mode", "vlanId").
	Facts []string
}

// Reporter receives doctor's results.
type Reporter interface {
	Pass(check, format string, args ...any)
	Fail(check, fix, format string, args ...any)
	Warn(check, fix, format string, args ...any)
}

// EndpointCheck is one endpoint record that `cnibox doctor` checks, handed
// to the roles' hooks.
type EndpointCheck struct {
	Reporter
	Endpoint store.Endpoint
	Host     *netops.Handle
	// Pod is the pod's namespace and PodLink its interface (nil and zero
	// in DoctorHost, which runs first).
	Pod     *netops.Handle
	PodLink netops.Link
	// Store is the node's store, open while the hooks run (nil: none).
	Store *store.Store
	// Recreate is the fix for damage only a new attachment repairs.
	Recreate string
	// InPod is how a person runs ip in the pod's netns ("ip -n NAME" or
	// "nsenter --net=PATH ip"), for the fixes.
	InPod string

	// Tables are routing tables besides main that hold the pod's routes
	// on purpose (sbr's, vrf's): doctor looks for a route there too.
	Tables []int
	// MTUSetBy names the role that set the pod interface's MTU on purpose
	// (tuning), so it may differ from the host end's.
	MTUSetBy string
}

// VethName is the host end name of a veth attachment with prefix (three
// characters, so the name stays within 15): prefix + 12 hex digits of
// sha256(containerID, ifname).
func VethName(prefix, containerID, ifname string) string {
	return prefix + hashHex(containerID+"\x00"+ifname, 6)
}

// hashHex is the first n bytes of sha256(s) in hex.
func hashHex(s string, n int) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:n])
}

// IsDeviceName reports whether a link name is prefix + 12 hex digits.
func IsDeviceName(prefix, name string) bool {
	if len(name) != len(prefix)+12 || name[:len(prefix)] != prefix {
		return false
	}
	for _, c := range name[len(prefix):] {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// Known returns the roles' declarations, each once (roles that share one,
// such as multi and multus, give it once), with the name of the first role
// that declares it.
func (r *Registry) Known() []NamedKnown {
	if r == nil {
		return nil
	}
	var out []NamedKnown
	seen := map[*Known]bool{}
	for _, role := range r.Roles() {
		if role.Known == nil || seen[role.Known] {
			continue
		}
		seen[role.Known] = true
		out = append(out, NamedKnown{Role: role.Name, Known: role.Known})
	}
	return out
}

// NamedKnown is a role's declaration with the role's name.
type NamedKnown struct {
	Role string
	*Known
}
