// Package fault marks the crash points of cnibox's ADD and DEL paths for the
// crash-consistency tests (test/reliability).
//
// Point is a no-op in every normal build. Built with the faultpoints tag
// (go build -tags faultpoints), Point(name) kills the process with SIGKILL
// when $CNIBOX_FAULT is name, so a test can stop a call at exactly that step,
// as a power cut or an OOM kill would, and check what a runtime's retry, DEL
// or GC makes of what is left. $CNIBOX_FAULT=name:stop stops the process
// there instead (SIGSTOP), so a test can change the world (say, delete the
// pod's namespace) before it continues it with SIGCONT.
//
// Point names are "<role>/<verb>/<after which step>", e.g.
// "bridge/add/after-veth".
package fault

// Env names the point at which a faultpoints build stops.
const Env = "CNIBOX_FAULT"
