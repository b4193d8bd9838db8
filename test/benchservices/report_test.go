package main

import (
	"bytes"
	"io"
	"net/netip"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func kp(n int, sync, p50, p99, rss float64) *result {
	return &result{Side: "kube-proxy", Anchor: true, Services: n, SyncS: sync, ChangeP50: p50, ChangeP99: p99, Samples: 50, RSSMiB: rss, Load: "0.50"}
}

func cb(n int, sync, p50, p99, rss float64) *result {
	return &result{Side: "cnibox", Services: n, SyncS: sync, ChangeP50: p50, ChangeP99: p99, Samples: 50, RSSMiB: rss, Load: "0.50"}
}

func unavailable(n int) *result {
	return &result{Side: "cnibox", Services: n, Unavailable: "no --service-proxy"}
}

func statuses(gs []goal) []string {
	var s []string
	for _, g := range gs {
		s = append(s, g.Status)
	}
	return s
}

func TestGoals(t *testing.T) {
	for _, tc := range []struct {
		name string
		rows []*result
		want []string // first sync, one change, p99 at 30,000, memory
	}{
		{"all met",
			[]*result{kp(10000, 20, 500, 900, 200), cb(10000, 1.5, 20, 40, 60), kp(30000, 60, 900, 2000, 400), cb(30000, 4, 25, 45, 90)},
			[]string{met, met, met, met}},
		{"just short of ten times, p99 over, more memory at one size",
			[]*result{kp(10000, 20, 500, 900, 200), cb(10000, 2.1, 40, 100, 60), kp(30000, 60, 900, 2000, 80), cb(30000, 4, 25, 51, 90)},
			[]string{notMet, notMet, notMet, notMet}},
		{"p50 ten times, p99 not: one change not met",
			[]*result{kp(10000, 20, 500, 900, 200), cb(10000, 1, 50, 91, 60)},
			[]string{met, notMet, notMeasured, met}},
		{"cnibox unavailable: nothing judged, nothing made up",
			[]*result{kp(10000, 20, 500, 900, 200), unavailable(10000), kp(30000, 60, 900, 2000, 400), unavailable(30000)},
			[]string{notMeasured, notMeasured, notMeasured, notMeasured}},
		{"only 1,000 Services run",
			[]*result{kp(1000, 2, 300, 500, 80), cb(1000, 0.1, 5, 9, 40)},
			[]string{notMeasured, notMeasured, notMeasured, met}},
		{"cnibox failed its first sync",
			[]*result{kp(10000, 20, 500, 900, 200), {Side: "cnibox", Services: 10000, Err: "first sync: not in the map"}},
			[]string{notMeasured, notMeasured, notMeasured, notMeasured}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := statuses(goals(tc.rows))
			if strings.Join(got, ",") != strings.Join(tc.want, ",") {
				t.Errorf("goals: %q, want %q", got, tc.want)
				writeGoals(testWriter{t}, goals(tc.rows))
			}
		})
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) { w.t.Log(string(b)); return len(b), nil }

func TestTable(t *testing.T) {
	var b bytes.Buffer
	writeTable(&b, []*result{kp(1000, 1.29, 420, 800, 80.6), cb(1000, 0.12, 8.4, 15, 40), kp(10000, 21.5, 1200, 2500, 180), unavailable(10000)})
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	want := []string{
		"| Services x 4 endpoints | proxy | first sync | one change p50 | one change p99 (changes timed) | RSS after the first sync (PSS) | load |",
		"| ---: | --- | ---: | ---: | ---: | ---: | --- |",
		"| 1,000 | kube-proxy | 1.29 s | 420 ms | 800 ms (50) | 80.6 MiB (0.0) | 0.50 |",
		"| 1,000 | cnibox | 0.12 s | 8.4 ms | 15 ms (50) | 40.0 MiB (0.0) | 0.50 |",
		"| 1,000 | kube-proxy / cnibox | 10.8x | 50.0x | 53.3x | 2.0x | |",
		"| 10,000 | kube-proxy | 21.5 s | 1200 ms | 2500 ms (50) | 180.0 MiB (0.0) | 0.50 |",
		"| 10,000 | cnibox | unavailable: no --service-proxy | - | - | - | |",
	}
	if len(lines) != len(want) {
		t.Fatalf("table:\n%s\nwant %d lines", b.String(), len(want))
	}
	for i := range want {
		if lines[i] != want[i] {
			t.Errorf("line %d:\n got %s\nwant %s", i, lines[i], want[i])
		}
	}
}

// A row whose notifications overflowed says so, with a footnote.
func TestTableOverflow(t *testing.T) {
	var b bytes.Buffer
	r := kp(30000, 250, 900, 2000, 700)
	r.Overflows = 1
	writeTable(&b, []*result{r})
	if !strings.Contains(b.String(), "| 250.0 s † |") || !strings.Contains(b.String(), "\n† nftables notifications overflowed") {
		t.Errorf("table:\n%s", b.String())
	}
}

func TestThousandsAndSizes(t *testing.T) {
	for n, want := range map[int]string{7: "7", 1000: "1,000", 30000: "30,000", 262144: "262,144"} {
		if got := thousands(n); got != want {
			t.Errorf("thousands(%d) = %q, want %q", n, got, want)
		}
	}
	if s, err := parseSizes("1000, 10_000,30000"); err != nil || len(s) != 3 || s[1] != 10000 {
		t.Errorf("parseSizes: %v %v", s, err)
	}
	for _, bad := range []string{"10000,1000", "0", "x", "1000,1000", "300000"} {
		if _, err := parseSizes(bad); err == nil {
			t.Errorf("parseSizes(%q): no error", bad)
		}
	}
	if _, err := parseOptions([]string{"-proxies", "kube-proxy,cilium"}, io.Discard); err == nil || !strings.Contains(err.Error(), "cilium") {
		t.Errorf("an unknown proxy: %v", err)
	}
}

// The addresses the harness looks for are where it says: the bench
// Services' in benchPrefix, the samples' outside it, endpoints in the
// cluster CIDR.
func TestAddresses(t *testing.T) {
	if got := benchIP(30000 - 1); got != netip.MustParseAddr("10.100.117.47") || !benchPrefix.Contains(benchIP(maxServices-1)) {
		t.Errorf("benchIP: %s", got)
	}
	if benchPrefix.Contains(sampleIP(0)) || !netip.MustParsePrefix(serviceCIDR).Contains(sampleIP(maxSamples-1)) {
		t.Errorf("sampleIP: %s .. %s", sampleIP(0), sampleIP(maxSamples-1))
	}
	cl := netip.MustParsePrefix(clusterCIDR)
	last := endpointIP(maxServices+maxSamples-1, endpointsPer-1)
	if !cl.Contains(endpointIP(0, 0)) || !cl.Contains(last) || nodePodNet.Contains(last) {
		t.Errorf("endpointIP: %s .. %s", endpointIP(0, 0), last)
	}
	s := slice("s-1", 1, nil)
	if len(s.Endpoints) != endpointsPer || s.Endpoints[3].Addresses[0] != "10.128.0.7" || s.Labels["kubernetes.io/service-name"] != "s-1" {
		t.Errorf("slice: %+v", s)
	}
}

func TestHasFlag(t *testing.T) {
	usage := "Usage of cnibox-agent:\n  -service-proxy\n    \tserve Services\n  -service-resync duration\n"
	if !hasFlag(usage, "service-proxy") || hasFlag(usage, "service") || hasFlag("  -service-proxy-x\n", "service-proxy") {
		t.Error("hasFlag")
	}
}

// A NEWSETELEM message of kube-proxy's map, as the kernel sends it (the
// attributes after nfgenmsg), decodes to its table, set and addresses.
func TestDecodeElems(t *testing.T) {
	key := func(a string) []byte {
		ip := netip.MustParseAddr(a).As4()
		v := append(ip[:], 6, 0, 0, 0, 0, 80, 0, 0) // . tcp . 80
		return nla(unix.NFTA_LIST_ELEM|unix.NLA_F_NESTED,
			nla(unix.NFTA_SET_ELEM_KEY|unix.NLA_F_NESTED, nla(unix.NFTA_DATA_VALUE, v)))
	}
	msg := append(append(nla(unix.NFTA_SET_ELEM_LIST_TABLE, []byte("kube-proxy\x00")), nla(unix.NFTA_SET_ELEM_LIST_SET, []byte("service-ips\x00"))...),
		nla(unix.NFTA_SET_ELEM_LIST_ELEMENTS|unix.NLA_F_NESTED, append(key("10.100.0.1"), key("10.104.0.2")...))...)
	keys, table, set, err := decodeElems(msg)
	if err != nil || table != "kube-proxy" || set != "service-ips" || len(keys) != 2 || keys[1] != netip.MustParseAddr("10.104.0.2") {
		t.Errorf("decodeElems: %v %q %q %v", keys, table, set, err)
	}
}

// nla is one netlink attribute (host byte order header, padded to 4).
func nla(typ uint16, data []byte) []byte {
	l := 4 + len(data)
	b := []byte{byte(l), byte(l >> 8), byte(typ), byte(typ >> 8)}
	b = append(b, data...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

// The watch's bookkeeping: adds and deletes, the count in the prefix and
// when it first reached the wanted number.
func TestWatchApply(t *testing.T) {
	w := &mapWatch{prefix: benchPrefix, since: map[netip.Addr]time.Time{}, full: map[int]time.Time{}, wantN: 2}
	t0 := time.Unix(100, 0)
	w.apply(benchIP(0), true, t0)
	w.apply(sampleIP(0), true, t0.Add(time.Second))  // not counted
	w.apply(benchIP(0), true, t0.Add(2*time.Second)) // again: keeps its first time
	if w.inPfx != 1 || !w.since[benchIP(0)].Equal(t0) {
		t.Fatalf("after adds: %d in prefix, since %v", w.inPfx, w.since[benchIP(0)])
	}
	w.apply(benchIP(1), true, t0.Add(3*time.Second))
	if got, ok := w.full[2]; !ok || !got.Equal(t0.Add(3*time.Second)) {
		t.Errorf("full[2] = %v, %v", got, ok)
	}
	w.apply(benchIP(1), false, t0.Add(4*time.Second))
	w.apply(benchIP(1), false, t0.Add(5*time.Second))
	if w.inPfx != 1 {
		t.Errorf("after deletes: %d in prefix", w.inPfx)
	}
}
