package bandwidth

// IsBandwidthIfb reports whether a link name has the shape of the bandwidth
// role's ifb devices ("cbw" + 12 hex digits), for the operator's CLI.
func IsBandwidthIfb(name string) bool { return bwIsOurIfb(name) }
