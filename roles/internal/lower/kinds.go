package lower

import "github.com/cnibox/cnibox/netops"

// The device kinds of the macvlan and ipvlan roles, one row each: a macvlan
// has its own MAC; an ipvlan shares its master's and may follow another role
// in a chain. Both announce their addresses when they come up, as the
// reference plugins do.
var (
	Macvlan = Spec{Kind: "macvlan", Modes: []string{"bridge", "private", "vepa", "passthru", "source"}, MAC: true, Notify: true, Create: (*netops.Handle).EnsureMacvlan}
	Ipvlan  = Spec{Kind: "ipvlan", Modes: []string{"l2", "l3", "l3s"}, Notify: true, Chained: true, Create: (*netops.Handle).EnsureIpvlan}
)
