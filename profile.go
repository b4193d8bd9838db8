//go:build !cniboxprof

package main

// startProfile is a no-op: the CPU profile hook (profile_pprof.go) is only in
// binaries built with -tags cniboxprof, so runtime/pprof stays out of the
// binary every runtime execs.
func startProfile() (stop func()) { return func() {} }
