package whereabouts

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/cnibox/cnibox/internal/agentapi"
	"github.com/cnibox/cnibox/roles/internal/roletest"
)

// load parses the ipam section as an ADD of container c1 / eth0 would, with
// CNI_ARGS args and more top-level fields top.
func load(t *testing.T, ipam, args string, top ...string) (*config, *agentapi.IPAMRequest, error) {
	t.Helper()
	a := roletest.ArgsFor([]byte(roletest.IPAMConf("1.0.0", ipam, top...)))
	if a == nil {
		t.Fatalf("not a config: %s", ipam)
	}
	if args != "" {
		a.RawArgs = args
		for _, kv := range strings.Split(args, ";") {
			k, v, _ := strings.Cut(kv, "=")
			switch k {
			case "IP":
				a.CNIArgs.IP.UnmarshalText([]byte(v))
			case "K8S_POD_NAMESPACE":
				a.CNIArgs.K8S_POD_NAMESPACE.UnmarshalText([]byte(v))
			case "K8S_POD_NAME":
				a.CNIArgs.K8S_POD_NAME.UnmarshalText([]byte(v))
			}
		}
	}
	cfg, err := loadConfig(a)
	if err != nil {
		return nil, nil, err
	}
	req, err := cfg.request(a)
	return cfg, req, err
}

// The ranges as whereabouts' LoadIPAMConfig normalizes them (its
// config_test.go and the README's examples), as the agent receives them.
func TestConfigRanges(t *testing.T) {
	for _, tc := range []struct {
		name, ipam string
		want       []agentapi.IPAMRange
	}{
		{"cidr", `{"type":"whereabouts","range":"192.168.2.0/24"}`,
			[]agentapi.IPAMRange{{Range: "192.168.2.0/24"}}},
		{"cidr with host bits is its network", `{"range":"192.168.2.5/24"}`,
			[]agentapi.IPAMRange{{Range: "192.168.2.0/24"}}},
		{"a-b/nn", `{"range":"192.168.2.225-192.168.2.230/28"}`,
			[]agentapi.IPAMRange{{Range: "192.168.2.224/28", Start: "192.168.2.225", End: "192.168.2.230"}}},
		{"a-b/nn wins over range_start and range_end", `{"range":"192.168.2.225-192.168.2.230/24","range_start":"192.168.2.10","range_end":"192.168.2.20"}`,
			[]agentapi.IPAMRange{{Range: "192.168.2.0/24", Start: "192.168.2.225", End: "192.168.2.230"}}},
		{"range_start range_end exclude", `{"range":"192.168.2.0/24","range_start":"192.168.2.10","range_end":"192.168.2.100","exclude":["192.168.2.20/30","192.168.2.50"]}`,
			[]agentapi.IPAMRange{{Range: "192.168.2.0/24", Start: "192.168.2.10", End: "192.168.2.100", Exclude: []string{"192.168.2.20/30", "192.168.2.50/32"}}}},
		{"ipv6", `{"range":"2001::0/116","gateway":"2001::f:1"}`,
			[]agentapi.IPAMRange{{Range: "2001::/116"}}},
		{"dual stack: range first, then ipRanges", `{"range":"10.1.0.0/24","ipRanges":[{"range":"fd00:10::/64","exclude":["fd00:10::/120"]},{"range":"10.2.0.0/24","range_start":"10.2.0.50"}]}`,
			[]agentapi.IPAMRange{{Range: "10.1.0.0/24"}, {Range: "fd00:10::/64", Exclude: []string{"fd00:10::/120"}}, {Range: "10.2.0.0/24", Start: "10.2.0.50"}}},
		{"ipRanges only, top exclude stays at the top", `{"ipRanges":[{"range":"10.3.0.0/24"}]}`,
			[]agentapi.IPAMRange{{Range: "10.3.0.0/24"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, req, err := load(t, tc.ipam, "")
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(req.Ranges, tc.want) {
				t.Errorf("ranges %+v, want %+v", req.Ranges, tc.want)
			}
		})
	}
}

func TestConfigFields(t *testing.T) {
	ipam := `{"type":"whereabouts","range":"10.1.0.0/24","gateway":"10.1.0.1","network_name":"blue",
		"enable_overlapping_ranges":false,"routes":[{"dst":"10.9.0.0/16","gw":"10.1.0.254"}],
		"dns":{"nameservers":["10.1.0.53"],"search":["example.org"]},"addresses":[{"address":"10.5.0.5/24","gateway":"10.5.0.1"}],
		"log_file":"/tmp/wb.log","log_level":"debug",
		"kubernetes":{"kubeconfig":"/etc/cni/net.d/whereabouts.d/whereabouts.kubeconfig"},"configuration_path":"/nonexistent/whereabouts.conf",
		"leader_lease_duration":1500,"leader_renew_deadline":1000,"leader_retry_period":500,"sleep_for_race":0,
		"reconciler_cron_expression":"30 4 * * *","datastore":"kubernetes","agentSocket":"/run/x.sock"}`
	cfg, req, err := load(t, ipam, "IgnoreUnknown=1;K8S_POD_NAMESPACE=ns1;K8S_POD_NAME=pod-0")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Gateway.String() != "10.1.0.1" || cfg.NetworkName != "blue" || cfg.Overlapping || len(cfg.Routes) != 1 ||
		cfg.DNS.Nameservers[0] != "10.1.0.53" || len(cfg.Addresses) != 1 || cfg.Addresses[0].Gateway.String() != "10.5.0.1" ||
		cfg.LogFile != "/tmp/wb.log" || cfg.LogLevel != "debug" || cfg.Socket != "/run/x.sock" {
		t.Errorf("config %+v", cfg)
	}
	if req.PodRef != "ns1/pod-0" || req.NetworkName != "blue" || req.Overlapping || req.Network != "mynet" || req.ContainerID != "c" || req.IfName != "eth0" {
		t.Errorf("request %+v", req)
	}
	// Defaults: overlapping ranges on (whereabouts' default), sticky on,
	// the agent's default socket.
	cfg, _, err = load(t, `{"range":"10.1.0.0/24"}`, "")
	if err != nil || !cfg.Overlapping || !cfg.Sticky || cfg.Socket != agentapi.DefaultSocket {
		t.Errorf("defaults %+v, %v", cfg, err)
	}
}

func TestConfigRequested(t *testing.T) {
	ipam := `{"range":"10.1.0.0/24","ipRanges":[{"range":"fd00::/120"}]}`
	_, req, err := load(t, ipam, "IP=10.1.0.7/24")
	if err != nil || !reflect.DeepEqual(req.Requested, []string{"10.1.0.7"}) {
		t.Errorf("CNI_ARGS IP: %+v, %v", req, err)
	}
	_, req, err = load(t, ipam, "", `"runtimeConfig":{"ips":["10.1.0.8/24","fd00::8/120"]}`)
	if err != nil || !reflect.DeepEqual(req.Requested, []string{"10.1.0.8", "fd00::8"}) {
		t.Errorf("ips capability: %+v, %v", req, err)
	}
	_, _, err = load(t, ipam, "IP=10.9.0.7")
	roletest.CheckErr(t, err, 7, "10.9.0.7", "no range", "10.1.0.1-10.1.0.254")
	_, _, err = load(t, ipam, "IP=10.1.0.255")
	roletest.CheckErr(t, err, 7, "10.1.0.255") // the broadcast address is never handed out
}

func TestConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		name, ipam string
		code       uint
		words      []string
	}{
		{"no ipam", `null`, 7, []string{`"ipam"`}},
		{"no range", `{"type":"whereabouts"}`, 7, []string{`"ipam.range"`, "192.168.2.0/24"}},
		{"bad cidr", `{"range":"10.1.0.0/33"}`, 7, []string{`"ipam.range"`, `"10.1.0.0/33"`}},
		{"bad a-b/nn start", `{"range":"x-10.1.0.9/24"}`, 7, []string{`"ipam.range"`, `"x"`}},
		{"bad a-b/nn end", `{"range":"10.1.0.1-10.1.0.9"}`, 7, []string{`"ipam.range"`, "a-b/nn"}},
		{"a-b/nn start outside", `{"range":"10.2.0.1-10.1.0.9/24"}`, 7, []string{"10.2.0.1", "outside", "10.1.0.0/24"}},
		{"too small", `{"range":"10.1.0.0/31"}`, 7, []string{"/30"}},
		{"bad range_start", `{"range":"10.1.0.0/24","range_start":"nope"}`, 7, []string{`"ipam.range_start"`}},
		{"range_end family", `{"range":"10.1.0.0/24","range_end":"fd00::1"}`, 7, []string{`"ipam.range_end"`, "family"}},
		{"bad exclude", `{"range":"10.1.0.0/24","exclude":["192.168.0.1/123"]}`, 7, []string{`"ipam.exclude[0]"`}},
		{"bad ipRanges exclude", `{"ipRanges":[{"range":"10.1.0.0/24","exclude":["x"]}]}`, 7, []string{`"ipam.ipRanges[0].exclude[0]"`}},
		{"overlapping ranges", `{"range":"10.1.0.0/24","ipRanges":[{"range":"10.1.0.128/25"}]}`, 7, []string{`"ipam.ipRanges[0].range"`, "overlaps"}},
		{"range_start without range", `{"range_start":"10.1.0.5","ipRanges":[{"range":"10.1.0.0/24"}]}`, 7, []string{`"ipam.range"`}},
		{"bad gateway", `{"range":"10.1.0.0/24","gateway":"x"}`, 7, []string{`"ipam.gateway"`}},
		{"bad route", `{"range":"10.1.0.0/24","routes":[{"dst":"x"}]}`, 7, []string{`"ipam.routes[0].dst"`}},
		{"bad address", `{"addresses":[{"address":"10.1.0.5"}]}`, 7, []string{`"ipam.addresses[0].address"`}},
		{"bad network_name", `{"range":"10.1.0.0/24","network_name":"Blue_Net"}`, 7, []string{`"ipam.network_name"`, "DNS-1123"}},
		{"slice size", `{"range":"10.1.0.0/24","node_slice_size":"/16"}`, 7, []string{`"ipam.node_slice_size"`}},
		{"slices of two ranges", `{"range":"10.1.0.0/16","ipRanges":[{"range":"10.2.0.0/16"}],"node_slice_size":"/24"}`, 7, []string{`"ipam.node_slice_size"`, "one range"}},
		{"range not a string", `{"range":24}`, 6, []string{"range"}},
		{"overlapping not a bool", `{"range":"10.1.0.0/24","enable_overlapping_ranges":"yes"}`, 6, []string{"enable_overlapping_ranges"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := load(t, tc.ipam, "")
			roletest.CheckErr(t, err, tc.code, tc.words...)
		})
	}
}

// The flat file fills what the section leaves out, as whereabouts merges
// it; the section wins.
func TestConfigFlatFile(t *testing.T) {
	dir := t.TempDir()
	flat := map[string]any{
		"datastore": "kubernetes", "kubernetes": map[string]string{"kubeconfig": "/x"},
		"range": "10.7.0.0/24", "log_level": "debug", "network_name": "flat",
	}
	b, _ := json.Marshal(flat)
	if err := os.WriteFile(filepath.Join(dir, "whereabouts.conf"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, req, err := load(t, `{"configuration_path":"`+dir+`","network_name":"mine"}`, "")
	if err != nil {
		t.Fatal(err)
	}
	if req.Ranges[0].Range != "10.7.0.0/24" || cfg.NetworkName != "mine" || cfg.LogLevel != "debug" {
		t.Errorf("merged %+v / %+v", cfg, req)
	}
	if err := os.WriteFile(filepath.Join(dir, "whereabouts.conf"), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, _, err = load(t, `{"configuration_path":"`+filepath.Join(dir, "whereabouts.conf")+`","range":"10.1.0.0/24"}`, "")
	roletest.CheckErr(t, err, 6, "whereabouts flat file")
}
