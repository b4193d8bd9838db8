package nft

import "github.com/cnibox/cnibox/internal/svcmodel"

// TraceSnap is traceSnap: every kind of ServicePort the table renders
// differently.
func TraceSnap() *svcmodel.Snapshot { return traceSnap() }
