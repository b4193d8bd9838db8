package e2e

import (
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/cnibox/cnibox/agent/multusconf"
)

// The multi role under Multus' type names, driven by libcni with Multus'
// own config files unchanged: the one Multus' thick daemon generates
// (pkg/server/config/generator.go from its thick manifest's
// daemon-config.json: capabilities copied from the primary, clusterNetwork
// = the primary's file, type multus-shim) and a thin config as Multus'
// docs/configuration.md shows it (clusterNetwork by network name in
// confDir, binDir, cniDir, logOptions, ...). No pod in CNI_ARGS (no agent
// here): the primary network alone, as Multus without a pod. The config
// cnibox's agent writes over the primary (agent/multusconf) runs the same.

const multusPrimary = `{"cniVersion":"1.0.0","name":"podnet","plugins":[{"type":"bridge","bridge":"mus0","isGateway":true,"isDefaultGateway":true,` +
	`"ipam":{"type":"host-local","ranges":[[{"subnet":"10.88.140.0/24"}]]}},{"type":"portmap","capabilities":{"portMappings":true}}]}`

func TestMultusConfigsLibcni(t *testing.T) {
	e := newEnv(t)
	dir := t.TempDir()
	netd, confDir := filepath.Join(dir, "net.d"), filepath.Join(dir, "multus.d")
	os.MkdirAll(netd, 0o755)
	os.MkdirAll(confDir, 0o755)
	primary := filepath.Join(netd, "10-podnet.conflist")
	os.WriteFile(primary, []byte(multusPrimary), 0o644)
	os.WriteFile(filepath.Join(confDir, "podnet.conflist"), []byte(multusPrimary), 0o644)
	thick := `{"capabilities":{"portMappings":true},"cniVersion":"0.3.1","logLevel":"verbose","logToStderr":true,"name":"multus-cni-network","clusterNetwork":"` + primary + `","type":"multus-shim"}`
	thin := `{"cniVersion":"0.3.1","name":"node-cni-network","type":"multus","kubeconfig":"/etc/kubernetes/node-kubeconfig.yaml","confDir":"` + confDir + `",` +
		`"cniDir":"/var/lib/cni/multus","binDir":"` + e.binDir + `","logFile":"` + filepath.Join(dir, "multus.log") + `","logLevel":"debug",` +
		`"logOptions":{"maxAge":5,"maxSize":100,"maxBackups":5,"compress":true},"capabilities":{"portMappings":true},"namespaceIsolation":false,` +
		`"clusterNetwork":"podnet","defaultNetworks":[],"systemNamespaces":["kube-system","admin"],"multusNamespace":"kube-system","retryDeleteOnError":false}`
	// and the one cnibox-agent --multus-conf-dir writes in front of it
	// (deploy/kubernetes/cnibox-multus.yaml)
	agentConf, _, err := multusconf.Generate(multusconf.Options{Dir: netd, HostDir: netd})
	if err != nil {
		t.Fatal(err)
	}
	wrap := func(plugin string) string {
		return `{"cniVersion":"0.3.1","name":"multus-cni-network","plugins":[` + plugin + `]}`
	}
	for name, list := range map[string]string{"thick": wrap(thick), "thin": wrap(thin), "cnibox-multus": string(agentConf)} {
		t.Run(name, func(t *testing.T) {
			l := listFromJSON(t, list)
			p := e.newPod("multus-" + name)
			p.rt.Args = [][2]string{{"IgnoreUnknown", "1"}}
			p.rt.CapabilityArgs = map[string]any{"portMappings": []map[string]any{{"hostPort": 18080, "containerPort": 80, "protocol": "tcp"}}}
			r := e.add(l, p)
			ip := podIP(t, r, true)
			if !netip.MustParsePrefix("10.88.140.0/24").Contains(ip) {
				t.Errorf("result address %s, want one of the primary's 10.88.140.0/24", ip)
			}
			if links := podLinks(t, p.netns); !slices.Contains(links, "eth0") || slices.Contains(links, "net1") {
				t.Errorf("pod links %v, want eth0 and no other network", links)
			}
			e.del(l, p)
			e.del(l, p)
			if slices.Contains(podLinks(t, p.netns), "eth0") {
				t.Errorf("eth0 left after DEL")
			}
		})
	}
}
