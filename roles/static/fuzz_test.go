package static

import (
	"encoding/json"
	"testing"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/cnibox/cnibox/cniplug"
)

// fuzzArgs builds the Args a call would have for stdin, or nil when stdin
// is not a config cniplug accepts (cniplug's own fuzz target covers that).
func fuzzArgs(stdin []byte) *cniplug.Args {
	conf := &cniplug.NetConf{}
	if json.Unmarshal(stdin, conf) != nil {
		return nil
	}
	return &cniplug.Args{Command: "ADD", ContainerID: "c", IfName: "eth0", StdinData: stdin, Conf: conf,
		Getenv: func(string) string { return "" }}
}

func parseCodeOK(t *testing.T, err error) {
	t.Helper()
	switch code := cniplug.CodeOf(err); code {
	case types.ErrDecodingFailure, types.ErrInvalidNetworkConfig, types.ErrUnsupportedField:
	default:
		t.Fatalf("code %d: %v", code, err)
	}
}

// FuzzStaticConfig: the static role's ipam section, with CNI_ARGS IP= and
// GATEWAY=, loads or fails with a config code; it never panics.
func FuzzStaticConfig(f *testing.F) {
	f.Add([]byte(`{"name":"n","ipam":{"type":"static","addresses":[{"address":"10.10.0.1/24","gateway":"10.10.0.254"},{"address":"fd00::1/64"}],"routes":[{"dst":"0.0.0.0/0"}],"dns":{"nameservers":["10.10.0.1"]}}}`), "IP=10.10.0.5/24;GATEWAY=10.10.0.254")
	f.Add([]byte(`{"name":"n","runtimeConfig":{"ips":["10.1.0.5/24"]},"ipam":{"type":"static"}}`), "")
	f.Add([]byte(`{"name":"n","ipam":{"type":"static","addresses":[{"address":"10.10.0.1"}]}}`), "IP=garbage")
	f.Fuzz(func(t *testing.T, stdin []byte, cniArgs string) {
		a := fuzzArgs(stdin)
		if a == nil {
			return
		}
		if types.LoadArgs(cniArgs, &a.CNIArgs) != nil {
			return
		}
		cfg, err := loadConfig(a)
		if err != nil {
			parseCodeOK(t, err)
			return
		}
		for _, ad := range cfg.Addresses {
			if !ad.Addr.IsValid() {
				t.Fatalf("invalid address accepted: %+v", ad)
			}
		}
	})
}
