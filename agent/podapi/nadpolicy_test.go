//go:build !nokube

package podapi

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"k8s.io/client-go/rest"

	"github.com/cnibox/cnibox/agent/kubeapi"
	"github.com/cnibox/cnibox/internal/agentapi"
	"github.com/cnibox/cnibox/internal/kubecore"
)

// nadServer is a pod API on a real socket (Serve), whose source is Kube
// reading NetworkAttachmentDefinitions from an HTTP API server that serves
// the objects the test put in it.
type nadServer struct {
	client *agentapi.Client
	mu     sync.Mutex
	nads   map[string]string // "ns/name" -> spec.config
}

func newNADServer(t *testing.T, trust string) *nadServer {
	t.Helper()
	s := &nadServer{nads: map[string]string{}}
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// /apis/k8s.cni.cncf.io/v1/namespaces/NS/network-attachment-definitions/NAME
		parts := strings.Split(r.URL.Path, "/")
		if len(parts) != 8 {
			http.NotFound(w, r)
			return
		}
		ns, name := parts[5], parts[7]
		s.mu.Lock()
		config, ok := s.nads[ns+"/"+name]
		s.mu.Unlock()
		if !ok {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusNotFound)
			io.WriteString(w, `{"apiVersion":"v1","kind":"Status","status":"Failure","reason":"NotFound","code":404}`)
			return
		}
		b, _ := json.Marshal(map[string]any{"apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
			"metadata": map[string]any{"namespace": ns, "name": name}, "spec": map[string]any{"config": config}})
		w.Header().Set("Content-Type", "application/json")
		w.Write(b)
	}))
	t.Cleanup(api.Close)
	// No client-side rate limit: the test asks hundreds of times.
	c, err := kubecore.Client(&rest.Config{Host: api.URL, QPS: -1}, &kubeapi.Pod{}, &kubeapi.PodList{})
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	k := &Kube{c: c, node: "n1", log: log, pods: noPods{}}
	tr, err := ParseNADTrust(trust)
	if err != nil {
		t.Fatal(err)
	}
	s.client = serveTest(t, k, Access{GID: NoGroup, NADTrust: tr})
	return s
}

// ask puts config in as ns/name and asks the pod API for it.
func (s *nadServer) ask(ns, name, config string) (*agentapi.NetAttachDef, error) {
	s.mu.Lock()
	s.nads[ns+"/"+name] = config
	s.mu.Unlock()
	return s.client.NetAttachDef(context.Background(), "", ns, name)
}

// secret stands for a value that must never come back in a message.
const secret = "/etc/shadow-never-quoted"

// spellings of each refused field: as the role writes it, and others that
// encoding/json takes for the same field.
func spellings(key string) []string {
	out := []string{key, strings.ToUpper(key), strings.ToLower(key), strings.ToUpper(key[:1]) + key[1:]}
	if i := strings.IndexAny(key, "sS"); i >= 0 {
		out = append(out, key[:i]+"ſ"+key[i+1:]) // U+017F folds to s
	}
	if i := strings.IndexAny(key, "kK"); i >= 0 {
		out = append(out, key[:i]+"\u212a"+key[i+1:]) // the Kelvin sign folds to k
	}
	return out
}

// nestings put a field (its key and value as JSON) somewhere in a NAD's
// config; want is the field's path in the message.
var nestings = []struct {
	name string
	put  func(kv string) string
	path string // with KEY for the key as written
}{
	{"top", func(kv string) string {
		return `{"cniVersion":"1.0.0","name":"n","type":"macvlan","linkInContainer":true,"master":"eth1",` + kv + `}`
	}, "KEY"},
	{"ipam", func(kv string) string {
		return `{"cniVersion":"1.0.0","name":"n","type":"dummy","ipam":{"type":"host-local","subnet":"10.1.0.0/24",` + kv + `}}`
	}, "ipam.KEY"},
	{"plugins[1]", func(kv string) string {
		return `{"cniVersion":"1.0.0","name":"n","plugins":[{"type":"dummy","ipam":{"type":"static"}},{"type":"tuning",` + kv + `}]}`
	}, "plugins[1].KEY"},
	{"plugins[0].ipam", func(kv string) string {
		return `{"cniVersion":"1.0.0","name":"n","plugins":[{"type":"vlan","vlanId":5,"linkInContainer":true,"ipam":{"type":"whereabouts","range":"10.2.0.0/24",` + kv + `}}]}`
	}, "plugins[0].ipam.KEY"},
	{"delegate", func(kv string) string {
		return `{"cniVersion":"1.0.0","name":"n","type":"flannel","delegate":{"hairpinMode":true,` + kv + `}}`
	}, "delegate.KEY"},
	{"delegate.ipam", func(kv string) string {
		return `{"cniVersion":"1.0.0","name":"n","type":"flannel","delegate":{"ipam":{"type":"host-local",` + kv + `}}}`
	}, "delegate.ipam.KEY"},
	{"deep", func(kv string) string {
		return `{"cniVersion":"1.0.0","name":"n","type":"dummy","ipam":{"type":"static","routes":[{"dst":"0.0.0.0/0","x":{"y":[{` + kv + `}]}}]}}`
	}, "ipam.routes[0].x.y[0].KEY"},
}

// TestNADRefusedFields: each field that names a host path, a socket or an
// endpoint, in each spelling and nesting, in a NAD of an untrusted
// namespace, is refused through the pod API with reason Policy and a
// message naming the field's path and the flag that trusts the namespace,
// never its value; the same NAD in a trusted namespace is served.
func TestNADRefusedFields(t *testing.T) {
	s := newNADServer(t, "trusted")
	keys := []string{"logFile", "dataDir", "log_file", "subnetFile", "rangeFromFile", "resolvConf", "endpoint", "agentSocket",
		"daemonSocketPath", "configuration_path", "confDir", "kernelpath", "CNIDeviceInfoFile"}
	for _, key := range keys {
		for _, sp := range spellings(key) {
			for _, nest := range nestings {
				kv, _ := json.Marshal(sp)
				config := nest.put(string(kv) + `:"` + secret + `"`)
				if !json.Valid([]byte(config)) {
					t.Fatalf("test config not JSON: %s", config)
				}
				_, err := s.ask("team-a", "net1", config)
				var ae *agentapi.Error
				want := strings.ReplaceAll(nest.path, "KEY", sp)
				if !errors.As(err, &ae) || ae.Reason != agentapi.ReasonPolicy || !strings.Contains(ae.Msg, "field "+want+" ") ||
					!strings.Contains(ae.Msg, "--nad-trusted-namespaces=trusted,team-a)") || strings.Contains(ae.Msg, secret) {
					t.Errorf("%s as %q in %s: %v; want reason Policy naming %s and the flag, without the value", key, sp, nest.name, err, want)
				}
				if nad, err := s.ask("trusted", "net1", config); err != nil || nad.Config != config {
					t.Errorf("%s as %q in %s of a trusted namespace: %v; want it served", key, sp, nest.name, err)
				}
			}
		}
	}
	// A key written with JSON escapes is the same key.
	if _, err := s.ask("team-a", "esc", `{"type":"dummy","ipam":{"type":"whereabouts","range":"10.2.0.0/24","\u006cog_file":"/x"}}`); err == nil || !strings.Contains(err.Error(), "ipam.log_file") {
		t.Errorf("an escaped log_file: %v; want it refused by name", err)
	}
}

// TestNADAllowlist: what an untrusted namespace's NAD may and may not use
// beyond the node fields: roles whose objects live in the node's namespace,
// plugins that are not cnibox roles, fields the allowlist does not know,
// and keys the roles' decoder would merge are refused naming the field;
// the attachment's own fields pass; "*" trusts every namespace.
func TestNADAllowlist(t *testing.T) {
	s := newNADServer(t, "")
	for _, tc := range []struct {
		config string
		field  string // "" = served
	}{
		{`{"cniVersion":"1.0.0","name":"n","type":"macvlan","linkInContainer":true,"master":"eth1","mode":"bridge","mtu":1400,
			"ipam":{"type":"whereabouts","range":"10.2.0.0/24","range_start":"10.2.0.10","exclude":["10.2.0.12/32"],"ipRanges":[{"range":"fd00::/64"}],
			"kubernetes":{"kubeconfig":"/etc/cni/net.d/whereabouts.d/whereabouts.kubeconfig"},"routes":[{"dst":"0.0.0.0/0","gw":"10.2.0.1"}]}}`, ""},
		{`{"cniVersion":"1.0.0","name":"n","plugins":[{"type":"dummy","ipam":{"type":"host-local","ranges":[[{"subnet":"10.3.0.0/24","gateway":"10.3.0.1"}]],"routes":[{"dst":"10.0.0.0/8"}]},"dns":{"nameservers":["10.3.0.53"]}},
			{"type":"tuning","sysctl":{"net.core.somaxconn":"512"},"capabilities":{"ips":true}},{"type":"sbr"},{"type":"vrf","vrfname":"blue"},{"type":"bandwidth","ingressRate":1000,"ingressBurst":100}]}`, ""},
		{`{"cniVersion":"1.0.0","name":"n","type":"tap","multiQueue":true,"owner":1000,"ipam":{"type":"static","addresses":[{"address":"10.4.0.2/24"}]}}`, ""},
		{`{"cniVersion":"1.0.0","name":"n","type":"vlan","vlanId":7,"linkInContainer":true,"master":"dummy0","ipam":{"type":"dhcp","request":[{"option":"classless-static-route"}]}}`, ""},
		{`{"cniVersion":"1.0.0","name":"n","type":"bridge","bridge":"cni0","ipam":{"type":"host-local","subnet":"10.244.0.0/16"}}`, "type"},
		{`{"cniVersion":"1.0.0","name":"n","plugins":[{"type":"dummy","ipam":{"type":"static"}},{"type":"portmap","capabilities":{"portMappings":true}}]}`, "plugins[1].type"},
		{`{"cniVersion":"1.0.0","name":"n","type":"host-device","device":"eth1"}`, "type"},
		{`{"cniVersion":"1.0.0","name":"n","type":"ptp","ipam":{"type":"static","addresses":[{"address":"10.96.0.1/32"}]}}`, "type"},
		{`{"cniVersion":"1.0.0","name":"n","type":"macvlan","master":"eth0","ipam":{"type":"static"}}`, "master"},
		{`{"cniVersion":"1.0.0","name":"n","type":"ipvlan","ipam":{"type":"static"}}`, "type"},
		{`{"cniVersion":"1.0.0","name":"n","type":"macvlan","linkInContainer":"true","master":"eth0"}`, "master"},
		{`{"cniVersion":"1.0.0","name":"n","type":"sriov","deviceID":"0000:00:01.0"}`, "type"},
		{`{"cniVersion":"1.0.0","name":"n","type":"tap","SELinuxContext":"system_u:system_r:spc_t:s0"}`, "SELinuxContext"},
		{`{"cniVersion":"1.0.0","name":"n","type":"dummy","ipam":{"type":"cloud-ipam","provider":"aws"}}`, "ipam.type"},
		{`{"cniVersion":"1.0.0","name":"n","type":"dummy","ipam":{"type":"calico-ipam"}}`, "ipam.type"},
		{`{"cniVersion":"1.0.0","name":"n","type":"dummy","ipam":{"type":"static"},"runtimeConfig":{"portMappings":[{"hostPort":22,"containerPort":22}]}}`, "runtimeConfig"},
		{`{"cniVersion":"1.0.0","name":"n","type":"bandwidth","prevResult":{"interfaces":[{"name":"eth0"}]}}`, "prevResult"},
		{`{"cniVersion":"1.0.0","name":"n","type":"dummy","ipam":{"type":"static"},"someField":1}`, "someField"},
		{`{"cniVersion":"1.0.0","name":"n","type":"dummy","ipam":{"type":"static"},"mtu":{"x":1}}`, "mtu"},
		{`{"cniVersion":"1.0.0","name":"n","type":"dummy","ipam":{"type":"static"},"ipam":{"type":"whereabouts"}}`, "ipam"},
		{`{"cniVersion":"1.0.0","name":"n","type":"dummy","ipam":{"type":"static","ROUTES":[],"routes":[]}}`, "ipam.routes"},
		{`{"cniVersion":"1.0.0","name":"n","plugins":[{"type":"host-local"}]}`, "plugins[0].type"},
		{`{"cniVersion":"1.0.0","name":"n","type":"multi","delegates":["/etc/cni/net.d/10-x.conflist"]}`, "type"},
	} {
		_, err := s.ask("team-a", "net1", tc.config)
		var ae *agentapi.Error
		switch {
		case tc.field == "" && err != nil:
			t.Errorf("%s: %v; want it served", tc.config, err)
		case tc.field != "" && (!errors.As(err, &ae) || ae.Reason != agentapi.ReasonPolicy || !strings.Contains(ae.Msg, "field "+tc.field+" ")):
			t.Errorf("%s: %v; want reason Policy naming field %s", tc.config, err, tc.field)
		}
	}
	// Not JSON: refused, without quoting it.
	if _, err := s.ask("team-a", "bad", `{"type": "dummy", `+secret); err == nil || strings.Contains(err.Error(), secret) {
		t.Errorf("a config that is not JSON: %v; want a refusal that does not quote it", err)
	}
	// An empty config is the node's own file (confDir): served.
	if _, err := s.ask("team-a", "file", ""); err != nil {
		t.Errorf("an empty config: %v", err)
	}
	all := newNADServer(t, "*")
	if _, err := all.ask("team-a", "net1", `{"type":"host-device","device":"eth1","dataDir":"/x"}`); err != nil {
		t.Errorf("host-device in a namespace \"*\" trusts: %v", err)
	}
}

// TestParseNADTrust: the flag's list.
func TestParseNADTrust(t *testing.T) {
	tr, err := ParseNADTrust(" kube-system, team-a ,")
	if err != nil || !tr.Trusts("kube-system") || !tr.Trusts("team-a") || tr.Trusts("team-b") || tr.String() != "kube-system,team-a" {
		t.Errorf("ParseNADTrust = %+v, %v", tr, err)
	}
	if tr, _ := ParseNADTrust(""); tr.Trusts("kube-system") {
		t.Errorf("an empty list trusts kube-system")
	}
	if _, err := ParseNADTrust("Team_A"); err == nil {
		t.Errorf("a namespace that is not a DNS label was accepted")
	}
}
