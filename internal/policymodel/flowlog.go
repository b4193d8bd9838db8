package policymodel

import "strings"

// FlowLog says which verdicts the table logs (docs/flowlog.md): for allow
// and for deny, every connection (All) or those from or to the addresses
// of a set (the pods of the namespaces whose annotation asks for it). A
// verdict is logged on the packets the policy chains see: a connection's
// first, and every packet of one that is dropped.
type FlowLog struct {
	Allow LogScope `json:",omitzero"`
	Deny  LogScope `json:",omitzero"`
	// Staged is the set of the pods a staged policy selects: every verdict
	// of theirs is logged, the default allow too (the agent compares it
	// with the staged rules').
	Staged SetID `json:",omitempty"`
}

// LogScope is where one verdict is logged.
type LogScope struct {
	All bool  `json:",omitempty"`
	Set SetID `json:",omitempty"` // "" with All false: nowhere
}

// On reports whether the verdict is logged anywhere.
func (s LogScope) On() bool { return s.All || s.Set != "" }

// FlowLogGroup is the NFLOG group the table logs verdicts to and the
// agent reads.
const FlowLogGroup = 1717

// The verdict letters of a log prefix.
const (
	logAllow = "a"
	logDeny  = "d"
)

// logPrefixHead starts every prefix of the table's log rules.
const logPrefixHead = "cnibox:"

// CounterInvalid names the table's counter (c-invalid) and log prefix
// (LogPrefix(false, CounterInvalid)) of the packets conntrack calls
// INVALID: dropped before any rule, since they belong to no connection the
// rules could judge (docs/policy.md).
const CounterInvalid = "invalid"

// LogPrefix is the NFLOG prefix of a verdict of the rule whose counter ID
// is counter (ShortID of the rule's ID, "iso-in"/"iso-eg" for a
// NetworkPolicy's isolation, CounterInvalid): "cnibox:d:<counter>". It fits NFLOG's 64
// bytes.
func LogPrefix(allow bool, counter string) string {
	v := logDeny
	if allow {
		v = logAllow
	}
	return logPrefixHead + v + ":" + counter
}

// ParseLogPrefix reads a prefix LogPrefix wrote; ok is false for any other.
func ParseLogPrefix(p string) (allow bool, counter string, ok bool) {
	rest, found := strings.CutPrefix(strings.TrimRight(p, "\x00"), logPrefixHead)
	if !found {
		return false, "", false
	}
	v, counter, found := strings.Cut(rest, ":")
	if !found || counter == "" || (v != logAllow && v != logDeny) {
		return false, "", false
	}
	return v == logAllow, counter, true
}
