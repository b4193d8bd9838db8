//go:build !faultpoints

package fault

// Enabled reports whether this build has fault points (the faultpoints tag).
const Enabled = false

// Point marks a crash point; without the faultpoints tag it does nothing and
// the compiler removes the call.
func Point(string) {}
