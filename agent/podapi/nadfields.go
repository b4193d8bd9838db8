package podapi

// The allowlist of NAD configs of untrusted namespaces, role by role. Its
// decisions, with the reasons, are the tables of docs/security.md: keep
// the two together.

// rule is one field: why it is refused (empty: allowed), or the shape its
// value must have (nil: anything the roles' decoder takes).
type rule struct {
	why   string
	shape shape
}

// shape checks a field's value at path.
type shape func(n *jsonNode, path string) error

// fieldSet is the fields of an object, by folded key (fold).
type fieldSet map[string]rule

// fieldsOf merges sets (folding their keys).
func fieldsOf(sets ...fieldSet) fieldSet {
	out := fieldSet{}
	for _, s := range sets {
		for k, r := range s {
			out[fold(k)] = r
		}
	}
	return out
}

// values are fields whose values are scalars or lists of them.
func values(names ...string) fieldSet {
	s := fieldSet{}
	for _, n := range names {
		s[fold(n)] = rule{shape: leaf}
	}
	return s
}

// refused are fields refused with why.
func refused(why string, names ...string) fieldSet {
	s := fieldSet{}
	for _, n := range names {
		s[fold(n)] = rule{why: why}
	}
	return s
}

// leaf takes a scalar or a list (of lists) of scalars.
func leaf(n *jsonNode, path string) error {
	if n.obj {
		return &refusal{path, "holds an object where the field takes a value or a list of values"}
	}
	return eachElem(n, path, leaf)
}

// object takes an object of fs.
func object(fs fieldSet) shape {
	return func(n *jsonNode, path string) error { return checkObject(n, path, fs) }
}

// list takes a list of values of shape s.
func list(s shape) shape {
	return func(n *jsonNode, path string) error {
		if !n.arr {
			return &refusal{path, "is not a list"}
		}
		return eachElem(n, path, s)
	}
}

// eachElem checks every element of the list n with s.
func eachElem(n *jsonNode, path string, s shape) error {
	for i, e := range n.elems {
		if err := s(e, index(path, i)); err != nil {
			return err
		}
	}
	return nil
}

// anyKeys takes an object of any keys whose values are scalars (a sysctl
// map, capabilities).
func anyKeys(n *jsonNode, path string) error {
	if !n.obj {
		return &refusal{path, "is not an object"}
	}
	for i, k := range n.keys {
		if !n.vals[i].scalar() {
			return &refusal{join(path, k), "is not a value"}
		}
	}
	return nil
}

// nodeFields are the keys that name a host path, a socket or an endpoint
// in some role: refused at any depth, in any object.
var nodeFields = fieldsOf(
	refused("names a directory on the node (the store, opened and written as root)", "dataDir"),
	refused("names a file on the node (cnibox's call log, created and appended as root)", "logFile"),
	refused("names a file on the node (whereabouts' log, created and appended as root)", "log_file"),
	refused("names a file on the node (flannel's subnet.env, read as root)", "subnetFile"),
	refused("names a file on the node (host-local's range, read as root)", "rangeFromFile"),
	refused("names a file on the node (a resolv.conf, read as root)", "resolvConf"),
	refused("names a file or directory on the node (whereabouts' flat file, read as root)", "configuration_path"),
	refused("names an endpoint the node calls (cloud IPAM's provider: HTTP from the node's network, or a file read as root)", "endpoint"),
	refused("names a socket on the node (cnibox-agent's pod API)", "agentSocket"),
	refused("names a socket on the node (the DHCP daemon's)", "daemonSocketPath", "daemonSocketDir"),
	refused("names a directory on the node (multi's configs and plugins)", "confDir", "binDir", "cniDir"),
	refused("names a file on the node (multi's readiness indicator)", "readinessindicatorfile"),
	refused("names a sysfs path of a node device (host-device's)", "kernelpath"),
	refused("names a file on the node (device information, written as root)", "CNIDeviceInfoFile"),
)

// dnsFields are the "dns" object of the result.
var dnsFields = values("nameservers", "domain", "search", "options")

// routeFields are a route of IPAM's result.
var routeFields = values("dst", "gw", "mtu", "advmss", "priority", "table", "scope")

// common are the fields of every plugin's config.
var common = fieldsOf(
	values("cniVersion", "cniVersions", "name", "type", "disableCheck", "disableGC", "ifname", "logLevel"),
	fieldSet{
		"capabilities": {shape: capabilitiesShape},
		"args": {shape: object(fieldsOf(fieldSet{"cni": {shape: object(fieldsOf(
			values("ips", "mtu", "promisc", "allmulti", "txQLen"), refused(refuseMAC, "mac"),
			fieldSet{"sysctl": {shape: sysctlShape}}))}}))},
	},
	refused("is the runtime's to give (host ports, devices, the device-info file), not a NAD's: declare \"capabilities\" instead", "runtimeConfig"),
	refused("names the interfaces the plugins after it act on, the node's among them: a chain makes it, not a NAD", "prevResult"),
)

// conflistFields are the top of a conflist.
var conflistFields = fieldsOf(
	values("cniVersion", "cniVersions", "name", "disableCheck", "disableGC", "ifname", "loadOnlyInlinedPlugins"),
	fieldSet{"plugins": {shape: list(checkPlugin)}},
)

// withIPAM are the fields of a role with an IPAM section and a DNS override.
var withIPAM = fieldSet{"ipam": {shape: checkIPAM}, "dns": {shape: object(dnsFields)}}

// roleSpec is a role an untrusted NAD may use: its fields, and inPodIf,
// when set, the field that must be true for the role to stay in the pod
// (linkInContainer: the master is the pod's).
type roleSpec struct {
	fields  fieldSet
	inPodIf string
}

// lowerFields are macvlan's, ipvlan's and vlan's (roles/internal/lower);
// checkPlugin holds master to checkInPodMaster. allowVethMaster is the
// roles' opt-in to a master that is a veth into another namespace.
var lowerFields = fieldsOf(common, withIPAM, values("master", "mtu", "linkInContainer"), fieldSet{"mode": {shape: notPassthru}},
	refused("lets the device go on a veth whose peer is outside the pod (the pod's eth0 into the node): its frames leave the pod as the pod's own", "allowVethMaster"))

// podRoles are the roles whose every object lives in the pod's network
// namespace (docs/security.md, "Roles").
var podRoles = map[string]roleSpec{
	"loopback":  {fields: common},
	"dummy":     {fields: fieldsOf(common, withIPAM, values("mode"))},
	"tuning":    {fields: fieldsOf(common, values("mtu", "promisc", "allmulti", "txQLen"), refused(refuseMAC, "mac"), fieldSet{"sysctl": {shape: sysctlShape}})},
	"bandwidth": {fields: fieldsOf(common, values("ingressRate", "ingressBurst", "egressRate", "egressBurst", "unshapedSubnets", "shapedSubnets"))},
	"sbr":       {fields: fieldsOf(common, values("table", "gateways", "addSourceHints"))},
	"vrf":       {fields: fieldsOf(common, values("vrfname", "table"))},
	"tap": {fields: fieldsOf(common, withIPAM, values("mtu", "multiQueue", "owner", "group", "bridge", "mode"), refused(refuseMAC, "mac"),
		refused("chooses a label of the node's SELinux policy: the plugin's thread takes that context to create the tap", "selinuxContext"))},
	"macvlan": {fields: fieldsOf(lowerFields, values("bcqueuelen"), refused(refuseMAC, "mac")), inPodIf: "linkInContainer"},
	"ipvlan":  {fields: lowerFields, inPodIf: "linkInContainer"},
	"vlan":    {fields: fieldsOf(lowerFields, values("vlanId")), inPodIf: "linkInContainer"},
}

// nodeRoles are the roles that make or join objects in the node's network
// namespace, or hand the pod a node resource: a NAD of a trusted namespace
// only.
var nodeRoles = map[string]string{
	"bridge":      "makes or joins a bridge of the node (cni0 unless named), with addresses, routes and masquerade rules there",
	"ptp":         "puts a veth's host end, and host routes to the pod's addresses, in the node's namespace",
	"host-device": "moves a device of the node into the pod",
	"flannel":     "attaches to the node's overlay (its subnet file and bridge)",
	"vxlan":       "attaches to the node's overlay (its subnet file and bridge)",
	"azure-vnet":  "attaches the pod to the node's NIC or a bridge on it",
	"portmap":     "opens host ports of the node",
	"firewall":    "writes rules in the node's forward path (nftables, or firewalld's zones)",
	"multi":       "is the node's meta plugin, not a network a NAD can name",
	"multus":      "is the node's meta plugin, not a network a NAD can name",
	"multus-shim": "is the node's meta plugin, not a network a NAD can name",
	"passthru":    "is the node's meta plugin, not a network a NAD can name",
}

// rangeFields are a host-local range.
var rangeFields = values("subnet", "rangeStart", "rangeEnd", "gateway")

// whereaboutsRange is a whereabouts range.
var whereaboutsRange = values("range", "range_start", "range_end", "exclude")

// addressList is static's and whereabouts' "addresses".
var addressList = fieldSet{"addresses": {shape: list(object(values("address", "gateway")))}}

// routesDNS are IPAM's "routes" and "dns".
var routesDNS = fieldSet{"routes": {shape: list(object(routeFields))}, "dns": {shape: object(dnsFields)}}

// podIPAM are the IPAM roles an untrusted NAD may use: they hand out
// addresses of pools, not node resources.
var podIPAM = map[string]fieldSet{
	"static": fieldsOf(values("type"), addressList, routesDNS),
	"host-local": fieldsOf(values("type", "sticky", "reclaimAfterReboot"), rangeFields, routesDNS,
		fieldSet{"ranges": {shape: list(list(object(rangeFields)))}}),
	"whereabouts": fieldsOf(values("type", "network_name", "enable_overlapping_ranges", "node_slice_size", "gateway", "log_level", "sticky",
		// accepted without effect (docs/roles/whereabouts.md): never read
		"datastore", "etcd_host", "etcd_username", "etcd_password", "etcd_key_file", "etcd_cert_file", "etcd_ca_cert_file",
		"leader_lease_duration", "leader_renew_deadline", "leader_retry_period", "sleep_for_race", "reconciler_cron_expression"),
		whereaboutsRange, addressList, routesDNS,
		fieldSet{
			"ipRanges":   {shape: list(object(whereaboutsRange))},
			"kubernetes": {shape: object(values("kubeconfig", "k8s_api_root"))}, // never read: the agent has the credentials
		}),
	"dhcp": fieldsOf(values("type", "priority"), fieldSet{
		"request": {shape: list(object(values("option", "skipDefault")))},
		"provide": {shape: list(object(values("option", "value", "fromArg")))},
	}),
}

// nodeIPAM are the IPAM roles that hand the pod a node resource.
var nodeIPAM = map[string]string{
	"cloud-ipam":      "hands the pod secondary addresses of the node's cloud NICs, asked of an endpoint from the node's network",
	"azure-vnet-ipam": "hands the pod secondary addresses of the node's cloud NICs, asked of an endpoint from the node's network",
}

// checkIPAM checks an "ipam" section by its type.
func checkIPAM(n *jsonNode, path string) error {
	typ, tp, err := typeOf(n, path, "an IPAM role", nodeIPAM)
	if err != nil {
		return err
	}
	fs, ok := podIPAM[typ.str]
	if !ok {
		return &refusal{tp, "names an IPAM plugin that is not one of cnibox's pool IPAM roles (static, host-local, whereabouts, dhcp): what its fields reach is not known to this node"}
	}
	return checkObject(n, path, fs)
}
