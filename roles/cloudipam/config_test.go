package cloudipam

import (
	"testing"
	"time"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/roles/internal/roletest"
)

func loadTest(t *testing.T, fixed, stdin string, env map[string]string) (*config, error) {
	t.Helper()
	var nc cniplug.NetConf
	nc.Name = "azure"
	nc.IPAM.Type = "cloud-ipam"
	if fixed != "" {
		nc.IPAM.Type = "azure-vnet-ipam"
	}
	a := &cniplug.Args{StdinData: []byte(stdin), Conf: &nc, Getenv: func(k string) string { return env[k] }}
	return loadConfig(a, fixed)
}

func TestLoadConfig(t *testing.T) {
	c, err := loadTest(t, ProviderAzure, `{"master": "eth0", "ipam": {"type": "azure-vnet-ipam"}}`, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Provider != "azure" || c.Endpoint != AzureEndpoint || c.Master != "eth0" || c.QueryInterval != 10*time.Second ||
		c.ConnectTimeout != 2*time.Second || c.ResponseTimeout != 5*time.Second || c.DNS.Nameservers[0] != "168.63.129.16" || c.Routes != nil {
		t.Errorf("defaults: %+v", c)
	}
	c, err = loadTest(t, "", `{"ipam": {"type": "cloud-ipam", "provider": "aws", "endpoint": "http://127.0.0.1:9/", "queryInterval": 30, "connectTimeout": "250ms", "responseTimeout": "3", "routes": [], "dns": {"nameservers": ["10.0.0.2"]}, "subnet": "172.31.0.0/20", "master": "ens5"}}`,
		map[string]string{EnvEndpoint: "http://127.0.0.1:8080"})
	if err != nil {
		t.Fatal(err)
	}
	if c.Endpoint != "http://127.0.0.1:8080" || c.QueryInterval != 30*time.Second || c.ConnectTimeout != 250*time.Millisecond ||
		c.ResponseTimeout != 3*time.Second || c.Routes == nil || len(c.Routes) != 0 || c.DNS.Nameservers[0] != "10.0.0.2" ||
		c.Subnet.String() != "172.31.0.0/20" || c.Master != "ens5" {
		t.Errorf("set: %+v", c)
	}
	c, err = loadTest(t, "", `{"ipam": {"type": "cloud-ipam", "provider": "file", "endpoint": "file:///etc/pools.json", "queryInterval": "0s"}}`, nil)
	if err != nil || c.Endpoint != "/etc/pools.json" || c.QueryInterval != 0 || len(c.DNS.Nameservers) != 0 {
		t.Errorf("file: %+v, %v", c, err)
	}

	for _, tt := range []struct {
		name, fixed, in string
		env             map[string]string
		code            uint
		words           []string
	}{
		{"no ipam", "", `{}`, nil, 7, []string{`"ipam"`}},
		{"no provider", "", `{"ipam": {}}`, nil, 7, []string{`"ipam.provider"`, "azure"}},
		{"unknown provider", "", `{"ipam": {"provider": "gcp"}}`, nil, 2, []string{`"gcp"`}},
		{"azure-vnet-ipam with another provider", ProviderAzure, `{"ipam": {"provider": "aws"}}`, nil, 2, []string{`"aws"`, "cloud-ipam"}},
		{"file without path", "", `{"ipam": {"provider": "file"}}`, nil, 7, []string{`"ipam.endpoint"`}},
		{"https", "", `{"ipam": {"provider": "aws", "endpoint": "https://x"}}`, nil, 7, []string{`"https://x"`, "http://"}},
		{"bad env", ProviderAzure, `{"ipam": {}}`, map[string]string{EnvEndpoint: "168.63.129.16"}, 7, []string{"$" + EnvEndpoint, `"168.63.129.16"`}},
		{"bad interval", ProviderAzure, `{"ipam": {"queryInterval": "soon"}}`, nil, 7, []string{`"ipam.queryInterval"`, `"soon"`}},
		{"negative interval", ProviderAzure, `{"ipam": {"queryInterval": "-1s"}}`, nil, 7, []string{"out of range"}},
		{"zero timeout", ProviderAzure, `{"ipam": {"connectTimeout": 0}}`, nil, 7, []string{`"ipam.connectTimeout"`, "out of range"}},
		{"infinite timeout", ProviderAzure, `{"ipam": {"responseTimeout": "Inf"}}`, nil, 7, []string{"out of range"}},
		{"bad subnet", ProviderAzure, `{"ipam": {"subnet": "10.240.0.1/16"}}`, nil, 7, []string{`"ipam.subnet"`}},
		{"bad routes", ProviderAzure, `{"ipam": {"routes": [{"dst": "nope"}]}}`, nil, 7, []string{`"ipam.routes"`}},
		{"route without dst", ProviderAzure, `{"ipam": {"routes": [{"gw": "10.0.0.1"}]}}`, nil, 7, []string{`"ipam.routes[0].dst"`}},
		{"bad dns", ProviderAzure, `{"ipam": {"dns": {"nameservers": ["dns.example"]}}}`, nil, 7, []string{`"ipam.dns.nameservers[0]"`}},
		{"not JSON", ProviderAzure, `{"ipam": `, nil, 6, []string{"not valid JSON"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := loadTest(t, tt.fixed, tt.in, tt.env)
			roletest.CheckErr(t, err, tt.code, tt.words...)
		})
	}
}
