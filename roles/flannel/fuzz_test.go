package flannel

import (
	"testing"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/cnibox/cnibox/cniplug"
)

// FuzzFlannelEnv: whatever flanneld's subnet.env holds, parsing gives an
// environment with a subnet and a network, or a decoding error (code 6); it
// never panics.
func FuzzFlannelEnv(f *testing.F) {
	for _, s := range []string{
		"FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.1.1/24\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\n",
		"FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_IPV6_NETWORK=fd00:10:244::/56\nFLANNEL_SUBNET=10.244.1.1/24\nFLANNEL_IPV6_SUBNET=fd00:10:244:1::1/64\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=false\n",
		"# comment\nFLANNEL_NETWORK=\"10.244.0.0/16,10.245.0.0/16\"\nFLANNEL_SUBNET='10.244.1.1/24'\nFLANNEL_MTU=70000\nFLANNEL_IPMASQ=maybe\n",
		"garbage\n",
		"FLANNEL_SUBNET=fd00::1/64\nFLANNEL_NETWORK=10.0.0.0/8\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		env, err := parseFlannelEnv("/run/flannel/subnet.env", data)
		if err != nil {
			if code := cniplug.CodeOf(err); code != types.ErrDecodingFailure {
				t.Fatalf("code %d: %v", code, err)
			}
			return
		}
		if len(env.networks) == 0 || (!env.subnet4.IsValid() && !env.subnet6.IsValid()) || env.mtu < 68 || env.mtu > 65535 {
			t.Fatalf("incomplete environment accepted: %+v", env)
		}
	})
}
