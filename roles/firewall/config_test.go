package firewall

import (
	"strings"
	"testing"

	"github.com/cnibox/cnibox/cniplug"
)

// TestParseConf: the defaults, and each refusal names its field.
func TestParseConf(t *testing.T) {
	for _, tc := range []struct {
		conf, want string
	}{
		{`{}`, ""},
		{`{"backend":"iptables","iptablesAdminChainName":"MY-ADMIN","ingressPolicy":"same-bridge"}`, ""},
		{`{"backend":"firewalld","firewalldZone":"public","ingressPolicy":"isolated"}`, ""},
		{`{"backend":"nft"}`, `"backend"`},
		{`{"ingressPolicy":"closed"}`, `"ingressPolicy"`},
		{`{"iptablesAdminChainName":"A-VERY-LONG-CHAIN-NAME-OF-30-CH"}`, `"iptablesAdminChainName"`},
		{`{"iptablesAdminChainName":"CNI FORWARD"}`, `"iptablesAdminChainName"`},
		{`{"iptablesAdminChainName":"CNI-FORWARD"}`, `"iptablesAdminChainName"`},
		{`{"backend":1}`, `config field "backend"`},
	} {
		t.Run(tc.conf, func(t *testing.T) {
			c, err := parseConf(&cniplug.Args{StdinData: []byte(tc.conf)})
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				if c.IptablesAdminChainName == "" || c.FirewalldZone == "" || c.IngressPolicy == "" {
					t.Errorf("defaults not filled in: %+v", c)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want one naming %s", err, tc.want)
			}
		})
	}
}

// TestOwner: owners fit iptables' comment and one network's prefix is not
// another's.
func TestOwner(t *testing.T) {
	long := strings.Repeat("x", 300)
	if o := owner("net", long, "eth0"); len(o) > 255 || !strings.HasPrefix(o, ownerPrefix("net")) {
		t.Errorf("owner of a long ID = %q", o)
	}
	if strings.HasPrefix(owner("a:b", "c", "eth0"), ownerPrefix("a")) {
		t.Error("network a's prefix matches network a:b's owners")
	}
}
