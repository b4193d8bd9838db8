package bridge

// VethPrefix starts the name of every host veth the bridge role creates.
const VethPrefix = vethPrefix

// HostVethName returns the host veth name of an attachment: "cbx" + 12 hex
// digits of sha256(containerID, ifname). The CLI uses it to tell which
// attachment a veth on the node belongs to.
func HostVethName(containerID, ifname string) string { return hostVethName(containerID, ifname) }

// IsHostVeth reports whether a link name has the shape of the host veths
// the bridge role creates.
func IsHostVeth(name string) bool { return isOurVeth(name) }
