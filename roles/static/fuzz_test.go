package static

import (
	"testing"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/cnibox/cnibox/roles/internal/roletest"
)

// FuzzStaticConfig: the static role's ipam section, with CNI_ARGS IP= and
// GATEWAY=, loads or fails with a config code; it never panics.
func FuzzStaticConfig(f *testing.F) {
	f.Add([]byte(`{"name":"n","ipam":{"type":"static","addresses":[{"address":"10.10.0.1/24","gateway":"10.10.0.254"},{"address":"fd00::1/64"}],"routes":[{"dst":"0.0.0.0/0"}],"dns":{"nameservers":["10.10.0.1"]}}}`), "IP=10.10.0.5/24;GATEWAY=10.10.0.254")
	f.Add([]byte(`{"name":"n","runtimeConfig":{"ips":["10.1.0.5/24"]},"ipam":{"type":"static"}}`), "")
	f.Add([]byte(`{"name":"n","ipam":{"type":"static","addresses":[{"address":"10.10.0.1"}]}}`), "IP=garbage")
	f.Fuzz(func(t *testing.T, stdin []byte, cniArgs string) {
		a := roletest.ArgsFor(stdin)
		if a == nil {
			return
		}
		if types.LoadArgs(cniArgs, &a.CNIArgs) != nil {
			return
		}
		cfg, err := loadConfig(a)
		if err != nil {
			roletest.ConfigCode(t, err)
			return
		}
		for _, ad := range cfg.Addresses {
			if !ad.Addr.IsValid() {
				t.Fatalf("invalid address accepted: %+v", ad)
			}
		}
	})
}
