package e2e

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"

	"github.com/cnibox/cnibox/internal/cloudfake"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nstest"
	"github.com/cnibox/cnibox/roles/cloudipam"
	"github.com/cnibox/cnibox/store"
)

// cloudNode turns the test's node namespace into a cloud VM: its eth0 is a
// veth (with the NIC's MAC and the node's address) to a "fabric" namespace
// that holds the subnet's gateway, and the node's default route goes there.
// It returns the fabric namespace; everything is removed when the test ends.
func cloudNode(t *testing.T, mac string, node, gw netip.Prefix, bridge string) string {
	t.Helper()
	fabric := nstest.NewNS(t, "fabric")
	host := hostHandle(t)
	fh, err := netops.Open(fabric)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fh.Close() })
	hw, _ := net.ParseMAC(mac)
	t.Cleanup(func() {
		host.DeleteLink(bridge)
		host.DeleteLink("eth0")
		host.NFT().DeleteFabric()
	})
	if _, _, err := host.EnsureVeth(netops.VethOpts{HostName: "eth0", PeerName: "eth0", Peer: fh, HostMAC: hw}); err != nil {
		t.Fatal(err)
	}
	for _, step := range []error{
		host.EnsureAddr("eth0", node, addrOpts()),
		host.EnsureRoute(netops.Route{GW: gw.Addr(), Dev: "eth0"}),
		fh.EnsureAddr("eth0", gw, addrOpts()),
	} {
		if step != nil {
			t.Fatal(step)
		}
	}
	return fabric
}

// azvVeths returns the host veths with the azure-vnet prefix.
func azvVeths(t *testing.T) []string {
	t.Helper()
	ls, err := hostHandle(t).Links()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, l := range ls {
		if l.Kind == "veth" && strings.HasPrefix(l.Name, "azv") {
			out = append(out, l.Name)
		}
	}
	return out
}

// fabricNeigh returns the MAC the fabric namespace has for ip.
func fabricNeigh(t *testing.T, fabric string, ip netip.Addr) string {
	t.Helper()
	h, err := netops.Open(fabric)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	ns, err := h.Neighs("eth0")
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range ns {
		if n.IP == ip && n.MAC != nil {
			return n.MAC.String()
		}
	}
	return ""
}

// ageCache makes the cached provider answer an hour old, as if the provider
// had last been asked long ago, so the next ADD asks again.
func (e *env) ageCache(network string) {
	e.t.Helper()
	st, err := store.Open(e.dataDir)
	if err != nil {
		e.t.Fatal(err)
	}
	defer st.Close()
	err = st.IPAM(network, func(tx *store.IPAMTx) error {
		c, ok := cloudipam.CacheOf(tx)
		if !ok {
			return errors.New("no cloud cache")
		}
		c.Fetched = c.Fetched.Add(-time.Hour)
		c.Attempted = c.Fetched
		return cloudipam.PutCache(tx, c)
	})
	if err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) cloudCache(network string) cloudipam.CloudCache {
	e.t.Helper()
	st, err := store.Open(e.dataDir)
	if err != nil {
		e.t.Fatal(err)
	}
	defer st.Close()
	var c cloudipam.CloudCache
	st.ViewIPAM(network, func(tx *store.IPAMTx) error { c, _ = cloudipam.CacheOf(tx); return nil })
	return c
}

// cniCode returns the CNI error code of a libcni error (0 if none).
func cniCode(err error) uint {
	var te *types.Error
	if errors.As(err, &te) {
		return te.Code
	}
	return 0
}

// cloudRun is what the Azure and AWS tests check with 30 (or n) pods.
type cloudRun struct {
	e       *env
	l       *libcni.NetworkConfigList
	fabric  string
	mac     string
	subnet  netip.Prefix
	node    netip.Prefix
	bridge  string
	pool    []netip.Addr // the secondary IPs
	full    string       // the exhaustion message
	outage  func()       // takes the provider down
	queries func() int32 // how often the provider was asked
}

func (r *cloudRun) run(t *testing.T) {
	e, l := r.e, r.l
	var pods []*pod
	got := map[netip.Addr]bool{}
	start := time.Now()
	for i := range r.pool {
		p := e.newPod(fmt.Sprint("p", i))
		res := e.add(l, p)
		ip := podIP(t, res, true)
		if !slices.Contains(r.pool, ip) || got[ip] {
			t.Fatalf("pod %d got %s: want a secondary IP not yet handed out", i, ip)
		}
		got[ip] = true
		if len(res.DNS.Nameservers) == 0 {
			t.Errorf("pod %d: no DNS in the result %+v", i, res)
		}
		pods = append(pods, p)
	}
	// One query per queryInterval (default 10s) at most: on a loaded machine
	// the 30 ADDs may span more than one interval.
	if q, most := int(r.queries()), 1+int(time.Since(start)/(10*time.Second)); q < 1 || q > most {
		t.Errorf("the provider was asked %d times for %d pods in %s, want 1..%d (once per queryInterval)", q, len(pods), time.Since(start).Round(time.Second), most)
	}
	extra := e.newPod("extra")
	_, err := e.cni.AddNetworkList(context.Background(), l, extra.rt)
	if err == nil || cniCode(err) != 100 || !strings.Contains(err.Error(), r.full) {
		t.Fatalf("ADD past the pool: %v (code %d), want code 100 with %q", err, cniCode(err), r.full)
	}

	// The node's NIC is on the bridge with the node's address and route.
	host := hostHandle(t)
	eth0, err := host.LinkByName("eth0")
	if err != nil {
		t.Fatal(err)
	}
	br, err := host.LinkByName(r.bridge)
	if err != nil {
		t.Fatal(err)
	}
	if eth0.MasterIndex != br.Index || br.MAC.String() != r.mac {
		t.Errorf("eth0 master %d (bridge %d), bridge MAC %s (want %s)", eth0.MasterIndex, br.Index, br.MAC, r.mac)
	}
	if a, _ := host.Addrs(r.bridge); !slices.Contains(a, r.node) {
		t.Errorf("bridge %s has %v, want the node's %s", r.bridge, a, r.node)
	}
	if n := len(azvVeths(t)); n != len(pods) {
		t.Errorf("%d azv veths for %d pods", n, len(pods))
	}

	// The fabric reaches pods by their IP and knows them by the NIC's MAC;
	// pods reach the fabric.
	for _, i := range []int{0, len(pods) - 1} {
		ip := r.ipOf(t, pods[i])
		if err := reachable(t, r.fabric, pods[i].netns, ip); err != nil {
			t.Fatalf("the fabric cannot reach pod %d at %s: %v", i, ip, err)
		}
		if mac := fabricNeigh(t, r.fabric, ip); mac != r.mac {
			t.Errorf("the fabric's neighbour entry for %s is %q, want the NIC's MAC %s", ip, mac, r.mac)
		}
		if err := reachable(t, pods[i].netns, r.fabric, r.subnet.Addr().Next()); err != nil {
			t.Errorf("pod %d cannot reach the gateway in the fabric: %v", i, err)
		}
	}

	if l.CNIVersion >= "0.4.0" {
		if err := e.cni.CheckNetworkList(context.Background(), l, pods[0].rt); err != nil {
			t.Errorf("CHECK: %v", err)
		}
	}

	// DEL (twice) releases: the address goes to the next pod.
	freed := r.ipOf(t, pods[0])
	e.del(l, pods[0])
	e.del(l, pods[0])
	if n := len(e.reservations(l.Name)); n != len(pods)-1 {
		t.Errorf("%d reservations after one DEL, want %d", n, len(pods)-1)
	}
	if ip := podIP(t, e.add(l, extra), true); ip != freed {
		t.Errorf("the next pod got %s, want the released %s", ip, freed)
	}
	pods[0] = extra

	// The provider goes away after its answer aged: the cache serves.
	e.ageCache(l.Name)
	r.outage()
	e.del(l, pods[1])
	late := e.newPod("late")
	if ip := podIP(t, e.add(l, late), true); !slices.Contains(r.pool, ip) {
		t.Errorf("during the outage the pod got %s", ip)
	}
	if c := e.cloudCache(l.Name); c.LastError == "" {
		t.Errorf("the failed query is not recorded in the cache: %+v", c)
	}
	pods[1] = late

	for _, p := range pods {
		e.del(l, p)
		e.del(l, p)
	}
	if got := e.reservations(l.Name); len(got) != 0 {
		t.Errorf("reservations left after DEL: %v", got)
	}
	if got := azvVeths(t); len(got) != 0 {
		t.Errorf("veths left after DEL: %v", got)
	}
	if fp, err := host.NFT().FabricPods(); err != nil || len(fp) != 0 {
		t.Errorf("fabric entries left after DEL: %v, %v", fp, err)
	}
}

func (r *cloudRun) ipOf(t *testing.T, p *pod) netip.Addr {
	t.Helper()
	h, err := netops.Open(p.netns)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	addrs, err := h.Addrs("eth0")
	if err != nil || len(addrs) == 0 {
		t.Fatalf("addresses of pod %s: %v, %v", p.id, addrs, err)
	}
	return addrs[0].Addr()
}

// TestAzureSeedConflist runs the AKS seed conflist unchanged (azure-vnet in
// bridge mode, azure-vnet-ipam, portmap) against a fake host agent serving
// the seed XML, on a node whose eth0 has the seed's MAC and primary address.
func TestAzureSeedConflist(t *testing.T) {
	e := newEnv(t)
	seed := "testdata"
	xml, err := os.ReadFile(filepath.Join(seed, "nmagent-getinterfaceinfov1.xml"))
	if err != nil {
		t.Fatal(err)
	}
	agent := cloudfake.NewAzure(t, string(xml))
	t.Setenv("CNIBOX_CLOUD_ENDPOINT", agent.URL())

	subnet := netip.MustParsePrefix("10.240.0.0/16")
	fabric := cloudNode(t, "00:0d:3a:51:c4:90", netip.MustParsePrefix("10.240.0.35/16"), netip.MustParsePrefix("10.240.0.1/16"), "azure0")
	l := loadList(t, filepath.Join(seed, "10-azure.conflist"))
	if ex := loadList(t, repoFile("examples", "75-azure.conflist")); string(ex.Bytes) != string(l.Bytes) {
		t.Errorf("examples/75-azure.conflist differs from the seed")
	}
	var pool []netip.Addr
	for i := 36; i <= 65; i++ {
		pool = append(pool, netip.MustParseAddr(fmt.Sprintf("10.240.0.%d", i)))
	}
	r := &cloudRun{
		e: e, l: l, fabric: fabric, mac: "00:0d:3a:51:c4:90", subnet: subnet, node: netip.MustParsePrefix("10.240.0.35/16"),
		bridge: "azure0", pool: pool,
		full:    "all 30 secondary IPs of NIC 00:0d:3a:51:c4:90 in 10.240.0.0/16 are in use",
		outage:  agent.Close,
		queries: agent.Hits,
	}
	r.run(t)
}

// TestAWSExample runs examples/76-aws.conflist against a fake IMDSv2: the
// ENI's first address is the node's, the others go to pods.
func TestAWSExample(t *testing.T) {
	e := newEnv(t)
	const mac = "0e:5c:11:22:33:44"
	imds := cloudfake.NewAWS(t, cloudfake.ENI{MAC: mac, Subnet: "172.31.0.0/20",
		IPs: []string{"172.31.5.10", "172.31.5.11", "172.31.5.12", "172.31.5.13", "172.31.5.20"}})
	t.Setenv("CNIBOX_CLOUD_ENDPOINT", imds.URL())

	// The example pins the NIC as ens5; this node calls it eth0.
	l := loadList(t, repoFile("examples", "76-aws.conflist"))
	l = listFromJSON(t, strings.Replace(string(l.Bytes), `"ens5"`, `"eth0"`, 1))
	fabric := cloudNode(t, mac, netip.MustParsePrefix("172.31.5.10/20"), netip.MustParsePrefix("172.31.0.1/20"), "vpc0")
	r := &cloudRun{
		e: e, l: l, fabric: fabric, mac: mac, subnet: netip.MustParsePrefix("172.31.0.0/20"), node: netip.MustParsePrefix("172.31.5.10/20"),
		bridge: "vpc0",
		pool: []netip.Addr{netip.MustParseAddr("172.31.5.11"), netip.MustParseAddr("172.31.5.12"),
			netip.MustParseAddr("172.31.5.13"), netip.MustParseAddr("172.31.5.20")},
		full:    "all 4 secondary IPs of NIC 0e:5c:11:22:33:44 in 172.31.0.0/20 are in use",
		outage:  func() { imds.SetDown(true) },
		queries: imds.Tokens,
	}
	r.run(t)
}

// TestAzureConcurrentColdStart: the first 30 ADDs of a node arrive at once,
// before anything is cached, the NIC moved or the fabric rules exist. All
// get distinct secondary IPs, the node keeps its address and default route
// (now on the bridge), and every pod is reachable from the fabric.
func TestAzureConcurrentColdStart(t *testing.T) {
	e := newEnv(t)
	seed := "testdata"
	xml, err := os.ReadFile(filepath.Join(seed, "nmagent-getinterfaceinfov1.xml"))
	if err != nil {
		t.Fatal(err)
	}
	agent := cloudfake.NewAzure(t, string(xml))
	t.Setenv("CNIBOX_CLOUD_ENDPOINT", agent.URL())
	fabric := cloudNode(t, "00:0d:3a:51:c4:90", netip.MustParsePrefix("10.240.0.35/16"), netip.MustParsePrefix("10.240.0.1/16"), "azure0")
	l := loadList(t, filepath.Join(seed, "10-azure.conflist"))

	const n = 30
	pods := make([]*pod, n)
	for i := range pods {
		pods[i] = e.newPod(fmt.Sprint("c", i))
	}
	ips := e.addAtOnce(l, pods)
	host := hostHandle(t)
	routes, err := host.Routes("azure0")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(routes, func(r netops.Route) bool { return r.Dst.Bits() == 0 && r.GW == netip.MustParseAddr("10.240.0.1") }) {
		t.Errorf("the node lost its default route: routes via azure0 %v", routes)
	}
	for _, i := range []int{0, n / 2, n - 1} {
		if err := reachable(t, fabric, pods[i].netns, ips[i]); err != nil {
			t.Errorf("the fabric cannot reach pod %d at %s: %v", i, ips[i], err)
		}
	}
	for _, p := range pods {
		e.del(l, p)
		e.del(l, p)
	}
	if got := e.reservations(l.Name); len(got) != 0 {
		t.Errorf("reservations left: %v", got)
	}
}

// addAtOnce adds every pod at the same time and returns their IPv4
// addresses in the pods' order; an ADD that fails or an address handed
// out twice fails the test.
func (e *env) addAtOnce(l *libcni.NetworkConfigList, pods []*pod) []netip.Addr {
	t := e.t
	t.Helper()
	ips := make([]netip.Addr, len(pods))
	errs := make([]error, len(pods))
	var wg sync.WaitGroup
	for i, p := range pods {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := e.cni.AddNetworkList(context.Background(), l, p.rt)
			if errs[i] = err; err == nil {
				ips[i] = podIP(t, mustCurrent(t, r), true)
			}
		}()
	}
	wg.Wait()
	seen := map[netip.Addr]int{}
	for i, err := range errs {
		if err != nil {
			t.Fatalf("ADD %d: %v", i, err)
		}
		if j, dup := seen[ips[i]]; dup {
			t.Fatalf("pods %d and %d both got %s", j, i, ips[i])
		}
		seen[ips[i]] = i
	}
	return ips
}
