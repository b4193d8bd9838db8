package cniplug

// What a role declares for `cnibox check` beyond its fields: the
// capabilities it reads, the node's interfaces, files and kernel features
// its ADD needs, and whether it is a chained plugin.

// Capability is a runtime capability a role reads from runtimeConfig (the
// CNI conventions' portMappings, bandwidth, ...). A runtime passes it only
// to a plugin whose config says "capabilities": {NAME: true}.
type Capability struct {
	// Name is the capability ("portMappings").
	Name string
	// Lost is what does not happen without it, in the words of a warning
	// ("the pods' hostPorts are not forwarded").
	Lost string
	// Unless are config fields that do the role's work without the
	// capability (bandwidth's own ingressRate ...): with one of them set,
	// a missing capability is no finding.
	Unless []string
}

// NodeLink is a config field naming an interface of the node that the
// role's ADD needs there (macvlan's "master", host-device's "device").
type NodeLink struct {
	// Field is the config field.
	Field string
	// Unless is a boolean config field that, when true, puts the interface
	// in the pod instead of on the node ("linkInContainer").
	Unless string
	// Moved says that ADD moves the interface into the pod (host-device):
	// one a pod holds now is missing from the node, so its absence is a
	// warning, not an error.
	Moved bool
}

// chainedVerbs is implemented by the Verbs of a chained role (roles/internal/chain):
// its ADD needs prevResult, the result of a main plugin before it.
type chainedVerbs interface{ NeedsPrevResult() bool }

// Chained reports whether r is a chained plugin: its ADD needs the result
// of a main plugin before it in the list (prevResult) and it reads no
// "ipam" section.
func (r *Role) Chained() bool {
	v, ok := r.Verbs.(chainedVerbs)
	return ok && v.NeedsPrevResult()
}

// NodeFile is a config field naming a file or a socket of the node that
// the role's ADD needs there (dhcp's "daemonSocketPath", flannel's
// "subnetFile"). The field is the role's own (an IPAM role's: of its ipam
// section).
type NodeFile struct {
	// Field is the config field.
	Field string
	// Default is the path when the field is not set ("" = looked for only
	// when set).
	Default string
	// Under is a directory the field's value names an entry of
	// ("/sys/bus/pci/devices" for a PCI address; "" = the value is a path).
	Under string
	// Socket says that a daemon listens there: check connects to it.
	Socket bool
	// Later says that what writes it starts after the config is installed
	// (the agent writes subnet.env): its absence is a warning.
	Later bool
	// Fails is what ADD does without it ("every ADD fails (CNI error 11)")
	// and Fix how to make it, in the words of a finding.
	Fails, Fix string
}

// KernelFeature is a part of the kernel a role's ADD needs: a link kind,
// nf_tables.
type KernelFeature struct {
	// Module is the module's name (/sys/module, modules.builtin,
	// modules.dep: "8021q").
	Module string
	// Config is its kernel config option ("CONFIG_VLAN_8021Q").
	Config string
}
