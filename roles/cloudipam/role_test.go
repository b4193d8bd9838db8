package cloudipam_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/internal/cloudfake"
	"github.com/cnibox/cnibox/netops/nstest"
	"github.com/cnibox/cnibox/roles/cloudipam"
	"github.com/cnibox/cnibox/roles/internal/roletest"
	"github.com/cnibox/cnibox/store"
)

// The role tests run in a private network namespace standing for the node:
// its NICs are dummy interfaces the tests create, and the fake host agent
// and IMDS listen on its loopback.
func TestMain(m *testing.M) { nstest.MainInPrivateNetns(m) }

var registry = cniplug.NewRegistry(cloudipam.Role, cloudipam.AzureRole)

const fixtureMAC = "00:0d:3a:51:c4:90"

// addNIC creates an interface with mac in the node namespace (a veth: this
// kernel has no dummy driver).
func addNIC(t *testing.T, name, mac string) {
	t.Helper()
	nstest.RequireRoot(t)
	for _, args := range [][]string{
		{"link", "add", name, "type", "veth", "peer", "name", name + "p"},
		{"link", "set", name, "address", mac, "up"},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v\n%s", args, err, out)
		}
	}
	t.Cleanup(func() { exec.Command("ip", "link", "del", name).Run() })
}

// newAgent is a fake Azure host agent serving body on loopback.
func newAgent(t *testing.T, body string) *cloudfake.Azure { return cloudfake.NewAzure(t, body) }

func fixture(t *testing.T) string {
	b, err := os.ReadFile("testdata/nmagent-getinterfaceinfov1.xml")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// node is a store directory and environment that calls share.
type node struct {
	t      *testing.T
	dir    string
	env    map[string]string
	stderr bytes.Buffer
}

func newNode(t *testing.T, endpoint string) *node {
	return &node{t: t, dir: t.TempDir(), env: map[string]string{cloudipam.EnvEndpoint: endpoint}}
}

func (n *node) call(role *cniplug.Role, cmd, cid, conf string) ([]byte, error) {
	e := map[string]string{
		"CNI_COMMAND": cmd, "CNI_CONTAINERID": cid, "CNI_NETNS": "/var/run/netns/" + cid,
		"CNI_IFNAME": "eth0", "CNI_PATH": "/opt/cni/bin", store.EnvDataDir: n.dir,
		"CNI_ARGS": "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=" + cid,
	}
	for k, v := range n.env {
		e[k] = v
	}
	return cniplug.Invoke(context.Background(), role, cniplug.Invocation{
		Getenv: func(k string) string { return e[k] }, Stdin: strings.NewReader(conf), Stderr: &n.stderr, Registry: registry,
	})
}

func (n *node) must(role *cniplug.Role, cmd, cid, conf string) []byte {
	n.t.Helper()
	out, err := n.call(role, cmd, cid, conf)
	if err != nil {
		n.t.Fatalf("%s %s %s: %v", role.Name, cmd, cid, err)
	}
	return out
}

func (n *node) cache(network string) cloudipam.CloudCache {
	n.t.Helper()
	s, err := store.Open(n.dir)
	if err != nil {
		n.t.Fatal(err)
	}
	defer s.Close()
	var c cloudipam.CloudCache
	s.ViewIPAM(network, func(tx *store.IPAMTx) error { c, _ = cloudipam.CacheOf(tx); return nil })
	return c
}

type result struct {
	IPs []struct {
		Address string `json:"address"`
		Gateway string `json:"gateway"`
	} `json:"ips"`
	Routes []struct {
		Dst string `json:"dst"`
		GW  string `json:"gw"`
	} `json:"routes"`
	DNS struct {
		Nameservers []string `json:"nameservers"`
	} `json:"dns"`
}

func parse(t *testing.T, out []byte) result {
	t.Helper()
	var r result
	if err := json.Unmarshal(out, &r); err != nil || len(r.IPs) == 0 {
		t.Fatalf("result %s: %v", out, err)
	}
	return r
}

// azureConf is the seed conflist's first plugin, as libcni hands it on.
func azureConf(version, ipamExtra string) string {
	return `{"cniVersion":"` + version + `","name":"azure","type":"azure-vnet","mode":"bridge","bridge":"azure0","ipam":{"type":"azure-vnet-ipam"` + ipamExtra + `}}`
}

func TestAzureVnetIPAM(t *testing.T) {
	addNIC(t, "eth0", fixtureMAC)
	ag := newAgent(t, fixture(t))
	n := newNode(t, ag.URL())
	conf := azureConf("0.3.0", `,"queryInterval":"1h"`)
	role := cloudipam.AzureRole

	got := map[string]string{} // address -> container
	for i := range 30 {
		cid := fmt.Sprint("pod", i)
		r := parse(t, n.must(role, "ADD", cid, conf))
		ip := r.IPs[0]
		p := netip.MustParsePrefix(ip.Address)
		if p.Bits() != 16 || p.Addr().Less(netip.MustParseAddr("10.240.0.36")) || netip.MustParseAddr("10.240.0.65").Less(p.Addr()) {
			t.Errorf("%s got %s, want a secondary IP 10.240.0.36-65 with /16", cid, ip.Address)
		}
		if other, dup := got[p.Addr().String()]; dup {
			t.Errorf("%s and %s both got %s", other, cid, p.Addr())
		}
		got[p.Addr().String()] = cid
		if ip.Gateway != "10.240.0.1" || !slices.Equal(r.DNS.Nameservers, []string{"168.63.129.16"}) ||
			len(r.Routes) != 1 || r.Routes[0].Dst != "0.0.0.0/0" || r.Routes[0].GW != "10.240.0.1" {
			t.Errorf("%s result %+v: want gateway 10.240.0.1, DNS 168.63.129.16, default route", cid, r)
		}
	}
	_, err := n.call(role, "ADD", "pod30", conf)
	roletest.CheckErr(t, err, cniplug.CodePoolExhausted, `network "azure"`, "all 30 secondary IPs of NIC 00:0d:3a:51:c4:90 in 10.240.0.0/16 are in use")
	if h := ag.Hits(); h != 1 {
		t.Errorf("the host agent was asked %d times, want once within queryInterval", h)
	}
	_, err = n.call(role, "STATUS", "", azureConf("1.1.0", `,"queryInterval":"1h"`))
	roletest.CheckErr(t, err, cniplug.CodeNotReady, "all 30 secondary IPs")

	// A retried ADD gets the same address; CHECK finds it.
	first := parse(t, n.must(role, "ADD", "pod0", conf)).IPs[0].Address
	if got[netip.MustParsePrefix(first).Addr().String()] != "pod0" {
		t.Errorf("retried ADD of pod0 got %s", first)
	}
	n.must(role, "CHECK", "pod0", azureConf("1.0.0", `,"queryInterval":"1h"`))

	// DEL (twice) releases: the address goes to the next pod.
	n.must(role, "DEL", "pod0", conf)
	n.must(role, "DEL", "pod0", conf)
	_, err = n.call(role, "CHECK", "pod0", azureConf("1.0.0", `,"queryInterval":"1h"`))
	roletest.CheckErr(t, err, 3, "pod0", "holds no address")
	if again := parse(t, n.must(role, "ADD", "pod30", conf)).IPs[0].Address; again != first {
		t.Errorf("pod30 got %s, want the released %s", again, first)
	}

	// GC keeps the valid attachments only.
	var keep []string
	for i := 2; i <= 30; i++ {
		keep = append(keep, fmt.Sprintf(`{"containerID":"pod%d","ifname":"eth0"}`, i))
	}
	gcConf := `{"cniVersion":"1.1.0","name":"azure","type":"azure-vnet","ipam":{"type":"azure-vnet-ipam","queryInterval":"1h"},"cni.dev/valid-attachments":[` + strings.Join(keep, ",") + `]}`
	n.must(role, "GC", "", gcConf)
	if _, err := n.call(role, "CHECK", "pod1", azureConf("1.0.0", `,"queryInterval":"1h"`)); cniplug.CodeOf(err) != 3 {
		t.Errorf("pod1 still holds its address after GC: %v", err)
	}
	n.must(role, "STATUS", "", azureConf("1.1.0", `,"queryInterval":"1h"`))
	n.must(role, "CHECK", "pod2", azureConf("1.0.0", `,"queryInterval":"1h"`))
}

func TestAzureRefreshAndOutage(t *testing.T) {
	addNIC(t, "eth0", fixtureMAC)
	fx := fixture(t)
	ag := newAgent(t, fx)
	n := newNode(t, ag.URL())
	conf := azureConf("0.3.0", `,"queryInterval":0`) // ask on every call
	role := cloudipam.AzureRole

	a := parse(t, n.must(role, "ADD", "a", conf)).IPs[0].Address
	if a != "10.240.0.36/16" {
		t.Fatalf("first pod got %s", a)
	}
	// The agent drops .36 (in use) and .37 (free), and adds .70.
	changed := strings.Replace(strings.Replace(fx, `<IPAddress Address="10.240.0.36" IsPrimary="false"/>`, "", 1),
		`<IPAddress Address="10.240.0.37" IsPrimary="false"/>`, `<IPAddress Address="10.240.0.70" IsPrimary="false"/>`, 1)
	ag.Set(changed)
	b := parse(t, n.must(role, "ADD", "b", conf)).IPs[0].Address
	if b == "10.240.0.36/16" || b == "10.240.0.37/16" {
		t.Errorf("pod b got %s, which the agent no longer lists", b)
	}
	c := n.cache("azure")
	if len(c.NICs) != 1 {
		t.Fatalf("cache %+v", c)
	}
	nic := c.NICs[0]
	has := func(list []netip.Addr, s string) bool { return slices.Contains(list, netip.MustParseAddr(s)) }
	if !has(nic.Vanished, "10.240.0.36") || has(nic.Addrs, "10.240.0.37") || has(nic.Vanished, "10.240.0.37") || !has(nic.Addrs, "10.240.0.70") || nic.Name != "eth0" || c.Provider != "azure" {
		t.Errorf("after the refresh the cache is %+v: want .36 vanished (in use), .37 gone, .70 new", c)
	}
	// The pod on the vanished address keeps it on a retry; its DEL drops it.
	if again := parse(t, n.must(role, "ADD", "a", conf)).IPs[0].Address; again != a {
		t.Errorf("retried ADD of a got %s, want %s", again, a)
	}
	n.must(role, "DEL", "a", conf)
	n.must(role, "DEL", "a", conf)
	if nic := n.cache("azure").NICs[0]; has(nic.Vanished, "10.240.0.36") || has(nic.Addrs, "10.240.0.36") {
		t.Errorf("released vanished address still cached: %+v", nic)
	}

	// The agent goes away: the cache serves.
	ag.Close()
	n.stderr.Reset()
	c1 := parse(t, n.must(role, "ADD", "c", conf)).IPs[0].Address
	if c1 == b || c1 == "10.240.0.36/16" {
		t.Errorf("during the outage pod c got %s", c1)
	}
	if !strings.Contains(n.stderr.String(), "using its answer of") {
		t.Errorf("stderr does not say the cache served: %q", n.stderr.String())
	}
	if lc := n.cache("azure"); lc.LastError == "" || !lc.Attempted.After(lc.Fetched) {
		t.Errorf("the failed query is not recorded: %+v", lc)
	}
	n.must(role, "DEL", "c", conf)

	// With no cache, an outage is "try again later".
	fresh := newNode(t, ag.URL())
	_, err := fresh.call(role, "ADD", "d", conf)
	roletest.CheckErr(t, err, 11, "Azure host agent at "+ag.URL(), "no earlier answer")
	_, err = fresh.call(role, "STATUS", "", azureConf("1.1.0", ""))
	roletest.CheckErr(t, err, cniplug.CodeNotReady, "Azure host agent")
	fresh.must(role, "DEL", "d", conf)
}

func TestAzureBadAnswers(t *testing.T) {
	addNIC(t, "eth0", fixtureMAC)
	fx := fixture(t)
	role := cloudipam.AzureRole
	conf := azureConf("0.3.0", "")
	for _, tt := range []struct {
		name, body string
		conf       string
		code       uint
		words      []string
	}{
		{"truncated", fx[:300], conf, 6, []string{"Azure host agent at", "not well-formed"}},
		{"entity expansion", `<!DOCTYPE x [<!ENTITY a "aaaa">]><Interfaces>&a;</Interfaces>`, conf, 6, []string{"DTD"}},
		{"oversized", `<Interfaces>` + strings.Repeat("<!-- padding -->", 70000) + `</Interfaces>`, conf, 6, []string{"1 MiB"}},
		{"another machine's NIC", strings.Replace(fx, "000D3A51C490", "000D3A51C4FF", 1), conf, 7,
			[]string{"none of the NICs", "NIC 00:0d:3a:51:c4:ff in 10.240.0.0/16", "eth0 " + fixtureMAC}},
		{"master not a NIC", fx, `{"cniVersion":"0.3.0","name":"azure","type":"azure-vnet","master":"eth9","ipam":{"type":"azure-vnet-ipam"}}`, 7, []string{`"master"`, `"eth9"`}},
		{"subnet not listed", fx, azureConf("0.3.0", `,"subnet":"10.9.0.0/16"`), 7, []string{"in subnet 10.9.0.0/16"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ag := newAgent(t, tt.body)
			n := newNode(t, ag.URL())
			_, err := n.call(role, "ADD", "x", tt.conf)
			roletest.CheckErr(t, err, tt.code, tt.words...)
		})
	}
	// master pins the NIC.
	ag := newAgent(t, fx)
	n := newNode(t, ag.URL())
	r := parse(t, n.must(role, "ADD", "x", `{"cniVersion":"0.3.0","name":"azure","type":"azure-vnet","master":"eth0","ipam":{"type":"azure-vnet-ipam"}}`))
	if r.IPs[0].Address != "10.240.0.36/16" {
		t.Errorf("with master: %+v", r)
	}
}

func TestAWS(t *testing.T) {
	const mac = "0e:5c:11:22:33:44"
	addNIC(t, "ens5", mac)
	addNIC(t, "ens6", "0e:5c:11:22:33:55") // another ENI of the node, not asked about when pinned
	imds := cloudfake.NewAWS(t,
		cloudfake.ENI{MAC: mac, IPs: []string{"172.31.5.10", "172.31.5.11", "172.31.5.12"}, Subnet: "172.31.0.0/20"},
		cloudfake.ENI{MAC: "0e:5c:11:22:33:55"})
	n := newNode(t, imds.URL())
	conf := `{"cniVersion":"1.0.0","name":"vpc","type":"bridge","ipam":{"type":"cloud-ipam","provider":"aws","master":"ens5","queryInterval":0}}`
	role := cloudipam.Role
	var got []string
	for _, cid := range []string{"a", "b"} {
		r := parse(t, n.must(role, "ADD", cid, conf))
		got = append(got, r.IPs[0].Address)
		if r.IPs[0].Gateway != "172.31.0.1" || !slices.Equal(r.DNS.Nameservers, []string{"169.254.169.253"}) {
			t.Errorf("result %+v", r)
		}
	}
	if !slices.Equal(got, []string{"172.31.5.11/20", "172.31.5.12/20"}) {
		t.Errorf("pods got %v, want the ENI's secondary addresses (never its primary 172.31.5.10)", got)
	}
	_, err := n.call(role, "ADD", "c", conf)
	roletest.CheckErr(t, err, cniplug.CodePoolExhausted, "all 2 secondary IPs of NIC 0e:5c:11:22:33:44 in 172.31.0.0/20 are in use", "ENI")

	imds.SetDown(true)
	n.must(role, "DEL", "a", conf)
	if r := parse(t, n.must(role, "ADD", "c", conf)); r.IPs[0].Address != "172.31.5.11/20" {
		t.Errorf("during the IMDS outage pod c got %+v, want the released 172.31.5.11 from the cache", r)
	}
	n.must(role, "DEL", "c", conf)
	n.must(role, "DEL", "b", conf)
}

func TestFilePools(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "pools.json")
	os.WriteFile(path, []byte(`{"interfaces": [{"subnet": "10.9.0.0/24", "addresses": ["10.9.0.10-10.9.0.11"]}]}`), 0o600)
	n := newNode(t, "")
	conf := `{"cniVersion":"1.1.0","name":"metal","type":"bridge","ipam":{"type":"cloud-ipam","provider":"file","endpoint":"` + path + `","queryInterval":0,"routes":[{"dst":"10.0.0.0/8"}]}}`
	role := cloudipam.Role
	r := parse(t, n.must(role, "ADD", "a", conf))
	if r.IPs[0].Address != "10.9.0.10/24" || r.IPs[0].Gateway != "10.9.0.1" || len(r.Routes) != 1 || r.Routes[0].Dst != "10.0.0.0/8" || len(r.DNS.Nameservers) != 0 {
		t.Errorf("result %+v", r)
	}
	n.must(role, "ADD", "b", conf)
	_, err := n.call(role, "ADD", "c", conf)
	roletest.CheckErr(t, err, cniplug.CodePoolExhausted, "all 2 addresses of the pool in 10.9.0.0/24 are in use", path)
	// The file grows: the next call sees it.
	os.WriteFile(path, []byte(`{"interfaces": [{"subnet": "10.9.0.0/24", "addresses": ["10.9.0.10-10.9.0.12"]}]}`), 0o600)
	if r := parse(t, n.must(role, "ADD", "c", conf)); r.IPs[0].Address != "10.9.0.12/24" {
		t.Errorf("after the file grew: %+v", r)
	}
	os.WriteFile(path, []byte(`{"interfaces": [{"subnet": "10.9.0.0/24", "adresses": []}]}`), 0o600)
	_, err = n.call(role, "ADD", "d", conf)
	roletest.CheckErr(t, err, 6, "pool file "+path, "a field this file may not hold")
	for _, cid := range []string{"a", "b", "c", "a"} {
		n.must(role, "DEL", cid, conf)
	}
}
