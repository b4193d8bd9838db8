package tuning_test

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nstest"
	"github.com/cnibox/cnibox/roles/bridge"
	"github.com/cnibox/cnibox/roles/internal/chaintest"
	"github.com/cnibox/cnibox/roles/tuning"
	"github.com/cnibox/cnibox/store"
)

// tbTuningFields changes everything tuning can change.
func tbTuningFields() map[string]any {
	return map[string]any{
		"sysctl": map[string]string{
			"net.core.somaxconn":              "1234",
			"net.ipv4.conf.IFNAME.arp_filter": "1",
			"net.ipv4.tcp_rmem":               "4096 65536 1048576",
		},
		"mac":      "c2:b0:57:49:47:f1",
		"mtu":      1400,
		"promisc":  true,
		"allmulti": true,
		"txQLen":   123,
	}
}

// TestTuningChain runs bridge + tuning at every spec version: the pod's
// sysctls and eth0 change, the result carries the new MAC, CHECK passes
// (and fails once the pod drifts), and DEL (twice) puts every value back.
func TestTuningChain(t *testing.T) {
	for _, v := range chaintest.Versions {
		t.Run(v, func(t *testing.T) {
			n := chaintest.NewNode(t)
			p := n.NewPod("tun")
			prev := n.Must(bridge.Role, "ADD", p, n.BridgeConf(v))
			before := chaintest.Link(t, p.Netns, "eth0")
			somax := chaintest.Sysctl(t, p.Netns, "net.core.somaxconn")
			rmem := chaintest.Sysctl(t, p.Netns, "net.ipv4.tcp_rmem")

			conf := n.Conf(v, "tuning", tbTuningFields(), prev)
			out := n.Must(tuning.Role, "ADD", p, conf)
			res := chaintest.Result(t, out, v)
			if len(res.Interfaces) != 3 || res.Interfaces[2].Mac != "c2:b0:57:49:47:f1" {
				t.Errorf("result interfaces %+v: want eth0 with the new MAC", res.Interfaces)
			}
			got := chaintest.Link(t, p.Netns, "eth0")
			if got.MAC.String() != "c2:b0:57:49:47:f1" || got.MTU != 1400 || !got.Promisc || !got.Allmulti || got.TxQLen != 123 {
				t.Errorf("eth0 after ADD = %+v", got)
			}
			for k, want := range map[string]string{
				"net.core.somaxconn": "1234", "net.ipv4.conf.eth0.arp_filter": "1", "net.ipv4.tcp_rmem": "4096\t65536\t1048576",
			} {
				if got := chaintest.Sysctl(t, p.Netns, k); got != want {
					t.Errorf("%s = %q, want %q", k, got, want)
				}
			}

			if v != "0.3.0" && v != "0.3.1" {
				check := n.Conf(v, "tuning", tbTuningFields(), out)
				if _, err := n.Call(tuning.Role, "CHECK", p, check); err != nil {
					t.Errorf("CHECK: %v", err)
				}
				pod, _ := netops.Open(p.Netns)
				pod.SetMTU("eth0", 1300)
				pod.Close()
				if _, err := n.Call(tuning.Role, "CHECK", p, check); err == nil || !strings.Contains(err.Error(), "MTU 1300") {
					t.Errorf("CHECK after the MTU changed = %v, want an error naming MTU 1300", err)
				}
			}

			for range 2 {
				n.Must(tuning.Role, "DEL", p, conf)
			}
			after := chaintest.Link(t, p.Netns, "eth0")
			if after.MAC.String() != before.MAC.String() || after.MTU != before.MTU || after.Promisc || after.Allmulti || after.TxQLen != before.TxQLen {
				t.Errorf("eth0 after DEL = %+v, want as before %+v", after, before)
			}
			if got := chaintest.Sysctl(t, p.Netns, "net.core.somaxconn"); got != somax {
				t.Errorf("somaxconn after DEL = %q, want %q", got, somax)
			}
			if got := chaintest.Sysctl(t, p.Netns, "net.ipv4.tcp_rmem"); got != rmem {
				t.Errorf("tcp_rmem after DEL = %q, want %q", got, rmem)
			}
			if got := chaintest.Sysctl(t, p.Netns, "net.ipv4.conf.eth0.arp_filter"); got != "0" {
				t.Errorf("arp_filter after DEL = %q, want 0", got)
			}
			if recs := tuningRecords(n); len(recs) != 0 {
				t.Errorf("tuning records after DEL: %+v", recs)
			}
			n.Must(bridge.Role, "DEL", p, n.BridgeConf(v))
		})
	}
}

func tuningRecords(n *chaintest.Node) []tuning.Record {
	n.T.Helper()
	st, err := store.Open(n.Dir)
	if err != nil {
		n.T.Fatal(err)
	}
	defer st.Close()
	recs, err := tuning.Records.In(st).List("")
	if err != nil {
		n.T.Fatal(err)
	}
	return recs
}

// TestTuningCapabilityAndArgs: the mac capability and args.cni override the
// config, as in the reference plugin; a repeated ADD keeps the first
// values to restore.
func TestTuningCapabilityAndArgs(t *testing.T) {
	n := chaintest.NewNode(t)
	p := n.NewPod("tuncap")
	prev := n.Must(bridge.Role, "ADD", p, n.BridgeConf("1.0.0"))
	orig := chaintest.Link(t, p.Netns, "eth0")
	fields := map[string]any{
		"mac":           "c2:00:00:00:00:01",
		"mtu":           1450,
		"runtimeConfig": map[string]any{"mac": "c2:00:00:00:00:02"},
		"args":          map[string]any{"cni": map[string]any{"mtu": 1420, "sysctl": map[string]string{"net.core.somaxconn": "777"}}},
	}
	conf := n.Conf("1.0.0", "tuning", fields, prev)
	n.Must(tuning.Role, "ADD", p, conf, "CNI_ARGS", "IgnoreUnknown=1;MAC=c2:00:00:00:00:03")
	got := chaintest.Link(t, p.Netns, "eth0")
	if got.MAC.String() != "c2:00:00:00:00:02" || got.MTU != 1420 {
		t.Errorf("eth0 = MAC %s MTU %d, want the capability's MAC c2:00:00:00:00:02 and args.cni's MTU 1420", got.MAC, got.MTU)
	}
	if v := chaintest.Sysctl(t, p.Netns, "net.core.somaxconn"); v != "777" {
		t.Errorf("somaxconn = %s, want args.cni's 777", v)
	}
	// Again: the record still holds the values from before the first ADD.
	n.Must(tuning.Role, "ADD", p, conf)
	for range 2 {
		n.Must(tuning.Role, "DEL", p, conf)
	}
	if got := chaintest.Link(t, p.Netns, "eth0"); got.MAC.String() != orig.MAC.String() || got.MTU != orig.MTU {
		t.Errorf("eth0 after DEL = MAC %s MTU %d, want the original %s %d", got.MAC, got.MTU, orig.MAC, orig.MTU)
	}
	n.Must(bridge.Role, "DEL", p, n.BridgeConf("1.0.0"))
}

// TestTuningRollback: a change that the kernel refuses undoes the ones
// before it and leaves no record. eth1 is a macvlan on a veth, so an MTU
// above the veth's is refused after the MAC and promiscuous mode were
// already changed.
func TestTuningRollback(t *testing.T) {
	nstest.RequireProgram(t, "ip", "iproute2")
	n := chaintest.NewNode(t)
	p := n.NewPod("tunrb")
	name := filepath.Base(p.Netns)
	for _, args := range [][]string{
		{"-n", name, "link", "add", "vp0", "type", "veth", "peer", "name", "vp1"},
		{"-n", name, "link", "add", "link", "vp0", "name", "eth1", "type", "macvlan"},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Skipf("ip %v: %v %s", args, err, out)
		}
	}
	before := chaintest.Link(t, p.Netns, "eth1")
	somax := chaintest.Sysctl(t, p.Netns, "net.core.somaxconn")
	prev := []byte(`{"cniVersion":"1.0.0","interfaces":[{"name":"eth1","sandbox":"` + p.Netns + `"}]}`)
	fields := map[string]any{"mac": "c2:00:00:00:00:09", "promisc": true, "mtu": 9000,
		"sysctl": map[string]string{"net.core.somaxconn": "999"}}
	_, err := n.Call(tuning.Role, "ADD", p, n.Conf("1.0.0", "tuning", fields, prev), "CNI_IFNAME", "eth1")
	if chaintest.Code(err) != 7 || !strings.Contains(err.Error(), `"mtu"`) {
		t.Fatalf("ADD with an MTU above the parent's = %v, want code 7 naming mtu", err)
	}
	after := chaintest.Link(t, p.Netns, "eth1")
	if after.MAC.String() != before.MAC.String() || after.Promisc != before.Promisc || after.MTU != before.MTU {
		t.Errorf("eth1 after the failed ADD = %+v, want as before %+v", after, before)
	}
	if v := chaintest.Sysctl(t, p.Netns, "net.core.somaxconn"); v != somax {
		t.Errorf("somaxconn after the failed ADD = %s, want %s", v, somax)
	}
	if recs := tuningRecords(n); len(recs) != 0 {
		t.Errorf("records after the failed ADD: %+v", recs)
	}

	// A sysctl the kernel refuses, after one it took: both as before.
	fields = map[string]any{"sysctl": map[string]string{"net.core.somaxconn": "999", "net.ipv4.conf.IFNAME.arp_filter": "lots"}}
	_, err = n.Call(tuning.Role, "ADD", p, n.Conf("1.0.0", "tuning", fields, prev), "CNI_IFNAME", "eth1")
	if chaintest.Code(err) != 7 || !strings.Contains(err.Error(), `"sysctl"`) {
		t.Fatalf("ADD with a bad sysctl value = %v, want code 7 naming sysctl", err)
	}
	if v := chaintest.Sysctl(t, p.Netns, "net.core.somaxconn"); v != somax {
		t.Errorf("somaxconn after the failed ADD = %s, want %s", v, somax)
	}
}

// TestTuningDelAfterPodGone: DEL succeeds (twice) and drops the record when
// the namespace is gone, with an empty CNI_NETNS, and with no record.
func TestTuningDelAfterPodGone(t *testing.T) {
	n := chaintest.NewNode(t)
	p := n.NewPod("tungone")
	prev := n.Must(bridge.Role, "ADD", p, n.BridgeConf("1.1.0"))
	conf := n.Conf("1.1.0", "tuning", tbTuningFields(), prev)
	n.Must(tuning.Role, "ADD", p, conf)
	// The runtime still names the namespace's path, but it is gone.
	for range 2 {
		n.Must(tuning.Role, "DEL", p, conf, "CNI_NETNS", p.Netns+"-gone")
	}
	if recs := tuningRecords(n); len(recs) != 0 {
		t.Errorf("records after DEL: %+v", recs)
	}
	n.Must(tuning.Role, "DEL", p, conf, "CNI_NETNS", "")
	q := chaintest.Pod{ID: "never-added", Netns: ""}
	n.Must(tuning.Role, "DEL", q, n.Conf("1.1.0", "tuning", tbTuningFields(), nil))
	n.Must(bridge.Role, "DEL", p, n.BridgeConf("1.1.0"), "CNI_NETNS", "")
}

// TestTuningGC drops the records of attachments not in the valid list.
func TestTuningGC(t *testing.T) {
	n := chaintest.NewNode(t)
	a, b := n.NewPod("tungca"), n.NewPod("tungcb")
	for _, p := range []chaintest.Pod{a, b} {
		prev := n.Must(bridge.Role, "ADD", p, n.BridgeConf("1.1.0"))
		n.Must(tuning.Role, "ADD", p, n.Conf("1.1.0", "tuning", map[string]any{"mtu": 1400}, prev))
	}
	gc := n.WithKeep(n.Conf("1.1.0", "tuning", map[string]any{"mtu": 1400}, nil), a)
	for range 2 {
		n.Must(tuning.Role, "GC", chaintest.Pod{}, gc)
	}
	recs := tuningRecords(n)
	if len(recs) != 1 || recs[0].ContainerID != a.ID {
		t.Errorf("records after GC = %+v, want only %s's", recs, a.ID)
	}
	for _, p := range []chaintest.Pod{a, b} {
		for range 2 {
			n.Must(tuning.Role, "DEL", p, n.Conf("1.1.0", "tuning", map[string]any{"mtu": 1400}, nil))
		}
		n.Must(bridge.Role, "DEL", p, n.BridgeConf("1.1.0"))
	}
	if recs := tuningRecords(n); len(recs) != 0 {
		t.Errorf("records after DEL: %+v", recs)
	}
}

// TestTuningConfig: bad configs fail before anything changes, with code 7
// (or 6) and a message naming the field.
func TestTuningConfig(t *testing.T) {
	n := chaintest.NewNode(t)
	p := chaintest.Pod{ID: "cfg", Netns: "/nonexistent/netns"}
	prev := []byte(`{"cniVersion":"1.0.0","interfaces":[{"name":"eth0","sandbox":"/x"}]}`)
	allow := filepath.Join(t.TempDir(), "allowlist.conf")
	if err := os.WriteFile(allow, []byte("# only these\n^net\\.core\\.somaxconn$\n\n^net\\.ipv4\\.conf\\.IFNAME\\.[a-z_]*$\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		conf  string
		extra []string
		code  uint
		want  string
	}{
		{"kernel sysctl", `"sysctl":{"kernel.hostname":"x"}`, nil, 7, "net."},
		{"dot dot", `"sysctl":{"net..core.x":"1"}`, nil, 7, `".."`},
		{"slash", `"sysctl":{"net/../../kernel/x":"1"}`, nil, 7, "slash"},
		{"directory", `"sysctl":{"net.core":"1"}`, nil, 7, "directory"},
		{"newline value", `"sysctl":{"net.core.somaxconn":"1\n2"}`, nil, 7, "newline"},
		{"duplicate", `"sysctl":{"net.core.somaxconn":"1","net.core.somaxconn":"2"}`, nil, 7, "twice"},
		{"number value", `"sysctl":{"net.core.somaxconn":1}`, nil, 6, "string"},
		{"multicast mac", `"mac":"01:00:5e:00:00:01"`, nil, 7, `"mac"`},
		{"bad capability mac", `"runtimeConfig":{"mac":"nope"}`, nil, 7, "runtimeConfig.mac"},
		{"multicast capability mac", `"runtimeConfig":{"mac":"01:00:00:00:00:00"}`, nil, 7, "runtimeConfig.mac"},
		{"multicast CNI_ARGS mac", `"mtu":1400`, []string{"CNI_ARGS", "IgnoreUnknown=1;MAC=03:00:00:00:00:01"}, 7, "CNI_ARGS MAC"},
		{"bad CNI_ARGS mac", `"mtu":1400`, []string{"CNI_ARGS", "IgnoreUnknown=1;MAC=zz"}, 7, "CNI_ARGS MAC"},
		{"mtu", `"mtu":20`, nil, 7, `"mtu"`},
		{"txQLen", `"txQLen":-1`, nil, 7, `"txQLen"`},
		{"not allowed", `"sysctl":{"net.core.rmem_max":"1"}`, []string{tuning.TuningAllowlistEnv, allow}, 7, "not allowed"},
		{"no prevResult", `"mtu":1400,"prevResult":null`, nil, 7, "prevResult"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conf := `{"cniVersion":"1.0.0","name":"tbnet","type":"tuning",` + tc.conf
			if !strings.Contains(tc.conf, "prevResult") {
				conf += `,"prevResult":` + string(prev)
			}
			conf += "}"
			_, err := n.Call(tuning.Role, "ADD", p, []byte(conf), tc.extra...)
			if chaintest.Code(err) != tc.code || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("ADD = %v, want code %d mentioning %q", err, tc.code, tc.want)
			}
		})
	}
	// Allowed by the allowlist: gets as far as the (missing) namespace.
	conf := `{"cniVersion":"1.0.0","name":"tbnet","type":"tuning","sysctl":{"net.ipv4.conf.IFNAME.arp_filter":"1"},"prevResult":` + string(prev) + `}`
	if _, err := n.Call(tuning.Role, "ADD", p, []byte(conf), tuning.TuningAllowlistEnv, allow); chaintest.Code(err) != 3 {
		t.Errorf("ADD of an allowed sysctl into a missing netns = %v, want code 3", err)
	}
}

// TestTuningAllowlistNotQuoted: a line of the sysctl allowlist that is not
// a regular expression is named by its number, never quoted.
func TestTuningAllowlistNotQuoted(t *testing.T) {
	n := chaintest.NewNode(t)
	p := chaintest.Pod{ID: "cfg", Netns: "/nonexistent/netns"}
	allow := filepath.Join(t.TempDir(), "allowlist.conf")
	if err := os.WriteFile(allow, []byte("^net\\.core\\.x$\nsecret(unclosed\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	conf := `{"cniVersion":"1.0.0","name":"tbnet","type":"tuning","sysctl":{"net.core.somaxconn":"1"},"prevResult":{"cniVersion":"1.0.0","interfaces":[{"name":"eth0","sandbox":"/x"}]}}`
	_, err := n.Call(tuning.Role, "ADD", p, []byte(conf), tuning.TuningAllowlistEnv, allow)
	if chaintest.Code(err) != 7 || !strings.Contains(err.Error(), "line 2") || !strings.Contains(err.Error(), "missing closing )") || strings.Contains(err.Error(), "secret") {
		t.Errorf("ADD = %v; want code 7 naming line 2 and what is wrong, without its text", err)
	}
}

// TestTuningMACInResult: with only a MAC the result's pod interface gets it
// and nothing else changes.
func TestTuningMACOnly(t *testing.T) {
	n := chaintest.NewNode(t)
	p := n.NewPod("tunmac")
	prev := n.Must(bridge.Role, "ADD", p, n.BridgeConf("0.4.0"))
	out := n.Must(tuning.Role, "ADD", p, n.Conf("0.4.0", "tuning", map[string]any{"mac": "C2:B0:57:49:47:F2"}, prev))
	res := chaintest.Result(t, out, "0.4.0")
	want, _ := net.ParseMAC("c2:b0:57:49:47:f2")
	if res.Interfaces[2].Mac != want.String() {
		t.Errorf("result MAC = %s, want %s", res.Interfaces[2].Mac, want)
	}
	recs := tuningRecords(n)
	if len(recs) != 1 || recs[0].MAC == "" || recs[0].MTU != 0 || recs[0].Promisc != nil || len(recs[0].Sysctls) != 0 {
		t.Errorf("record = %+v, want only the old MAC", recs)
	}
	n.Must(tuning.Role, "DEL", p, n.Conf("0.4.0", "tuning", nil, out))
	n.Must(bridge.Role, "DEL", p, n.BridgeConf("0.4.0"))
}
