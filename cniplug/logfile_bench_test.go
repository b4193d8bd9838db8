package cniplug

import (
	"bytes"
	"path/filepath"
	"testing"
)

// BenchmarkAppendRecord is the log's cost in a CNI call: one record
// appended to a log with room left (the common case).
//
//	go test -run '^$' -bench AppendRecord -count 5 ./cniplug/
func BenchmarkAppendRecord(b *testing.B) {
	path := filepath.Join(b.TempDir(), "cnibox.log")
	rec := append(bytes.Repeat([]byte("x"), 400), '\n')
	for b.Loop() {
		appendRecord(path, rec)
	}
}
