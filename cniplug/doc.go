// Package cniplug is the CNI adapter shared by every role of cnibox: it reads the
// CNI_* environment and stdin, checks the spec version, dispatches the verb to a
// role, converts the result to the config's version and prints either the result
// or a CNI error JSON. It also runs delegations (IPAM, meta plugins): in process
// when the delegate type is a role of this binary, otherwise by exec through
// CNI_PATH exactly as the spec says.
package cniplug
