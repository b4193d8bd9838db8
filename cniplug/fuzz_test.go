package cniplug

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
)

// documentedCodes are the CNI error codes a call may end with (README).
var documentedCodes = map[uint]bool{1: true, 2: true, 3: true, 4: true, 5: true, 6: true, 7: true, 11: true, 50: true, 100: true, 101: true}

// parseRole reads everything cniplug decodes for a role (requested IPs and
// MAC, prevResult, GC's list) and answers with one address.
var parseRole = &Role{
	Name: "parse",
	Verbs: &ConfVerbs[NoConf]{Add: func(_ context.Context, a *Args, _ NoConf) (types.Result, error) {
		if _, err := a.RequestedIPs(); err != nil {
			return nil, err
		}
		if _, err := a.RequestedMAC(); err != nil {
			return nil, err
		}
		if _, err := a.Conf.PrevResult(); err != nil {
			return nil, err
		}
		a.Conf.Keeps("c", "eth0")
		return &current.Result{CNIVersion: current.ImplementedSpecVersion,
			IPs: []*current.IPConfig{{Address: net.IPNet{IP: net.IPv4(10, 0, 0, 2), Mask: net.CIDRMask(24, 32)}}}}, nil
	},
		Del: func(_ context.Context, a *Args, _ NoConf) error {
			_, err := a.Conf.PrevResult()
			return err
		},
	},
}

// FuzzInvoke feeds arbitrary stdin, CNI_ARGS, container IDs and interface
// names through Invoke: it must never panic, every error must carry a
// documented code, and an ADD's output must be a result in the config's
// cniVersion.
func FuzzInvoke(f *testing.F) {
	f.Add([]byte(`{"cniVersion":"1.1.0","name":"n","type":"parse"}`), "", "c1", "eth0", false)
	f.Add([]byte(`{"cniVersion":"0.4.0","name":"n","type":"parse","runtimeConfig":{"ips":["10.1.0.5/24"],"mac":"0a:58:0a:f4:00:05"},"args":{"cni":{"ips":["fd00::5"]}}}`),
		"IgnoreUnknown=1;K8S_POD_NAMESPACE=ns;K8S_POD_NAME=p;IP=10.1.0.6", "c2", "net1", false)
	f.Add([]byte(`{"cniVersion":"1.0.0","name":"n","type":"parse","prevResult":{"cniVersion":"1.0.0","interfaces":[{"name":"eth0","sandbox":"/x"}],"ips":[{"address":"10.1.0.5/24","interface":0}]}}`),
		"", "c3", "eth0", true)
	f.Add([]byte(`{"cniVersion":"0.3.1","name":"n","type":"parse","prevResult":{"cniVersion":"0.3.1","ips":[{"version":"4","address":"10.1.0.5/24"}]}}`), "MAC=zz", "c4", "eth0", false)
	f.Fuzz(func(t *testing.T, stdin []byte, cniArgs, cid, ifname string, del bool) {
		verb := "ADD"
		if del {
			verb = "DEL"
		}
		env := map[string]string{
			"CNI_COMMAND": verb, "CNI_CONTAINERID": cid, "CNI_NETNS": "/var/run/netns/x",
			"CNI_IFNAME": ifname, "CNI_PATH": "/opt/cni/bin", "CNI_ARGS": cniArgs,
		}
		out, err := Invoke(context.Background(), parseRole, Invocation{
			Getenv: func(k string) string { return env[k] },
			Stdin:  bytes.NewReader(stdin),
			Stderr: &bytes.Buffer{},
		})
		if err != nil {
			if code := CodeOf(err); !documentedCodes[code] {
				t.Fatalf("error code %d is not documented: %v", code, err)
			}
			if te := AsTypesError(err); te.Msg == "" {
				t.Fatal("an error without a message")
			}
			return
		}
		if verb != "ADD" {
			return
		}
		var got struct {
			CNIVersion string `json:"cniVersion"`
		}
		if err := json.Unmarshal(out, &got); err != nil {
			t.Fatalf("ADD output is not JSON: %v\n%s", err, out)
		}
		var conf struct {
			CNIVersion string `json:"cniVersion"`
		}
		_ = json.Unmarshal(stdin, &conf)
		if got.CNIVersion != conf.CNIVersion {
			t.Fatalf("ADD answered in cniVersion %q, the config says %q", got.CNIVersion, conf.CNIVersion)
		}
	})
}
