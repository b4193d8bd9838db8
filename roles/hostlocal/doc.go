// Package hostlocal is the host-local IPAM role (addresses from ranges,
// reserved in the node's store through the shared allocator in package ipam)
// and the static IPAM role (addresses written in the config or passed by the
// runtime; nothing stored). Both read the "ipam" section of the plugin config
// that the main plugin (or the runtime) passes on stdin, with the fields of
// the reference plugins of the same names.
package hostlocal
