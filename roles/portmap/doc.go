// Package portmap is the portmap role: host ports to the pod (the
// portMappings capability) with nftables maps in table inet cnibox-portmap,
// flat in the number of pods.
package portmap
