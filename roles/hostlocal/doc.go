// Package hostlocal is the host-local IPAM role: addresses from ranges,
// reserved in the node's store through the shared allocator in package ipam.
// It reads the "ipam" section of the plugin config that the main plugin (or
// the runtime) passes on stdin, with the fields of the reference plugin of
// the same name.
package hostlocal
