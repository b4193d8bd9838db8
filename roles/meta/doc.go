// Package meta holds the small and chaining roles: loopback, portmap, tuning,
// bandwidth, and the meta plugins flannel (delegates to bridge + host-local
// from subnet.env) and multi (several networks per pod).
package meta
