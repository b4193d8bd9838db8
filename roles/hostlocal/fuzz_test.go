package hostlocal

import (
	"encoding/json"
	"testing"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/roles/internal/roletest"
)

// fuzzArgs builds the Args a call would have for stdin, or nil when stdin
// is not a config cniplug accepts (cniplug's own fuzz target covers that).
// File-reading fields are dropped: the fuzzer must not read the machine's
// files (TestHostileFiles covers them).
func fuzzArgs(stdin []byte) *cniplug.Args {
	var m map[string]any
	if json.Unmarshal(stdin, &m) != nil {
		return nil
	}
	if ipam, ok := m["ipam"].(map[string]any); ok {
		delete(ipam, "rangeFromFile")
		delete(ipam, "resolvConf")
		stdin, _ = json.Marshal(m)
	}
	return roletest.ArgsFor(stdin)
}

// FuzzLoadConfig: host-local's ipam section (ranges, legacy range, the
// ipRanges capability, routes) either loads into canonical, non-overlapping
// range sets or fails with a config code; it never panics.
func FuzzLoadConfig(f *testing.F) {
	for _, s := range []string{
		`{"name":"n","ipam":{"type":"host-local","ranges":[[{"subnet":"10.1.0.0/24","rangeStart":"10.1.0.10","rangeEnd":"10.1.0.20","gateway":"10.1.0.1"}],[{"subnet":"fd00::/64"}]],"routes":[{"dst":"0.0.0.0/0"}]}}`,
		`{"name":"n","ipam":{"type":"host-local","subnet":"10.2.0.0/16","gateway":"10.2.0.254","sticky":true}}`,
		`{"name":"n","runtimeConfig":{"ipRanges":[[{"subnet":"10.3.0.0/30"}]]},"ipam":{"type":"host-local"}}`,
		`{"name":"n","ipam":{"ranges":[[{"subnet":"10.1.0.0/24"}],[{"subnet":"10.1.0.128/25"}]]}}`,
		`{"name":"n","ipam":{"ranges":[[{"subnet":"10.1.0.5/32"}]]}}`,
		`{"name":"n","ipam":{"ranges":[[{"subnet":"::/0"}]]}}`,
		`{"name":"n","ipam":{"ranges":[[]]}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, stdin []byte) {
		a := fuzzArgs(stdin)
		if a == nil {
			return
		}
		cfg, err := loadConfig(a, loadOptions{ranges: true})
		if err != nil {
			roletest.ConfigCode(t, err)
			return
		}
		if len(cfg.Sets) == 0 {
			t.Fatal("loaded without a range set")
		}
		for i, s := range cfg.Sets {
			if len(s) == 0 {
				t.Fatalf("set %d is empty", i)
			}
			for _, r := range s {
				if !r.Subnet.Contains(r.Start) || !r.Subnet.Contains(r.End) || r.End.Less(r.Start) {
					t.Fatalf("range %v: start %s end %s outside its subnet %s", r, r.Start, r.End, r.Subnet)
				}
			}
		}
	})
}
