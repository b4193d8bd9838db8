package nft

import "testing"

// SetLogRates sets the flow log meters' rates (per source and rule, and
// the node's; policy_logmeter.go) for the tables rendered until t ends.
func SetLogRates(t testing.TB, perSource, node uint64) {
	oldSrc, oldNode := logSourceRate, logNodeRate
	logSourceRate, logNodeRate = perSource, node
	t.Cleanup(func() { logSourceRate, logNodeRate = oldSrc, oldNode })
}
