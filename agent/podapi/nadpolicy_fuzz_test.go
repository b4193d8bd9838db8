package podapi

import "testing"

// FuzzNADPolicy feeds the allowlist any config. It never panics, and what
// it lets through holds, at any depth, no key that names something on the
// node and no two keys of one object that encoding/json would merge.
func FuzzNADPolicy(f *testing.F) {
	for _, s := range []string{
		`{"cniVersion":"1.0.0","name":"n","type":"macvlan","linkInContainer":true,"master":"eth1","ipam":{"type":"whereabouts","range":"10.2.0.0/24","log_level":"debug"}}`,
		`{"cniVersion":"1.0.0","name":"n","plugins":[{"type":"tap","ipam":{"type":"host-local","ranges":[[{"subnet":"10.3.0.0/24"}]]}},{"type":"tuning","sysctl":{"net.core.somaxconn":"1"}}]}`,
		`{"type":"dummy","ipam":{"type":"static","routes":[{"dst":"0.0.0.0/0","x":{"y":[{"LogFile":"/x"}]}}]}}`,
		`{"type":"flannel","delegate":{"ipam":{"type":"host-local","ſubnetFile":"/etc/shadow"}}}`,
		`{"type":"vlan","vlanId":5,"linkInContainer":true,"ipam":{"type":"dhcp","request":[{"option":"router"}]},"args":{"cni":{"sysctl":{"a":"b"}}}}`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, config string) {
		if walkNAD(config) != nil {
			return
		}
		root, err := parseTree([]byte(config))
		if err != nil {
			t.Fatalf("accepted a config that is not JSON: %v", err)
		}
		var check func(n *jsonNode, path string)
		check = func(n *jsonNode, path string) {
			seen := map[string]bool{}
			for i, k := range n.keys {
				f := fold(k)
				if _, ok := nodeFields[f]; ok {
					t.Fatalf("accepted %s at %s", k, path)
				}
				if seen[f] {
					t.Fatalf("accepted %s twice at %s", k, path)
				}
				seen[f] = true
				check(n.vals[i], join(path, k))
			}
			for i, e := range n.elems {
				check(e, index(path, i))
			}
		}
		check(root, "")
	})
}

// BenchmarkNADPolicy is the allowlist's cost per NAD the pod API serves
// to an untrusted namespace (a macvlan with whereabouts, a tuning chain).
func BenchmarkNADPolicy(b *testing.B) {
	config := `{"cniVersion":"1.0.0","name":"n","plugins":[{"type":"macvlan","linkInContainer":true,"master":"eth1","mode":"bridge",` +
		`"ipam":{"type":"whereabouts","range":"10.2.0.0/24","exclude":["10.2.0.1/32"],"routes":[{"dst":"0.0.0.0/0","gw":"10.2.0.1"}]}},` +
		`{"type":"tuning","sysctl":{"net.core.somaxconn":"512"},"capabilities":{"ips":true}}]}`
	b.ReportAllocs()
	for b.Loop() {
		if err := walkNAD(config); err != nil {
			b.Fatal(err)
		}
	}
}
