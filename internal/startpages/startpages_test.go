package startpages

import (
	"os"
	"strconv"
	"strings"
	"testing"
)

// rssFileKiB is the process's resident file-backed memory (RssFile of
// /proc/self/status), what ps and the kubelet count of the binary.
func rssFileKiB(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "RssFile:"); ok {
			n, err := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatal("no RssFile in /proc/self/status")
	return 0
}

// TestRelease: the test binary's resident file pages fall after Release,
// by an eighth of what it released at least: the code that runs next, this
// test's and the runtime's threads', maps its pages back, 64 KiB around
// each fault, before the second read (2 of 2.7 MiB released without
// -race, 2-2.5 of 3.7 under make test's -race). The program goes on
// running. The bar was a quarter of RssFile before, which the refaults
// left a 3% margin: under -race at load 38 it missed (4976 -> 3760 KiB
// with 3752 KiB released).
func TestRelease(t *testing.T) {
	before := rssFileKiB(t)
	n, err := Release()
	if err != nil {
		t.Fatal(err)
	}
	after := rssFileKiB(t)
	t.Logf("released %d KiB; RssFile %d -> %d KiB", n/1024, before, after)
	if n == 0 {
		t.Fatal("no read-only mapping of the binary found in /proc/self/maps")
	}
	if released := int(n / 1024); before-after < released/8 {
		t.Errorf("RssFile %d -> %d KiB after %d KiB released: want it down by an eighth of that at least", before, after, released)
	}
	// Code that ran before runs again.
	if rssFileKiB(t) == 0 {
		t.Error("RssFile 0")
	}
}

// TestReadOnlyMappings: the binary's code and read-only data, never its
// writable data.
func TestReadOnlyMappings(t *testing.T) {
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		t.Fatal(err)
	}
	ms, err := readOnlyMappings(exe)
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) < 2 {
		t.Fatalf("%d read-only mappings of %s, want the code and the read-only data", len(ms), exe)
	}
	// This function's code is in one of them, a writable variable in none.
	pc := funcPC()
	var inCode bool
	for _, m := range ms {
		if pc >= m.start && pc < m.end {
			inCode = true
		}
		if v := varAddr(); v >= m.start && v < m.end {
			t.Errorf("writable variable at %x in read-only mapping %x-%x", v, m.start, m.end)
		}
	}
	if !inCode {
		t.Errorf("the code at %x is in none of %v", pc, ms)
	}
}
