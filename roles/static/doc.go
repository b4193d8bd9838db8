// Package static is the static IPAM role: the addresses written in the
// config's "ipam" section or passed by the runtime, with routes and DNS;
// nothing is allocated or stored. It reads the fields of the reference
// plugin of the same name.
package static
