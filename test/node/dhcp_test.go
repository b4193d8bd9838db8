//go:build kube

package node

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// The dhcp network of TestKubeNodeMultusOverBridge: a macvlan on the
// node's NIC whose address comes from a DHCP server on the cluster's
// underlay, through cnibox-multus.yaml's dhcp daemon (its container: every
// capability dropped but three, the runtime's seccomp profile, a read-only
// root, /run/netns and /run/cni of the node, no token).
const (
	dhcpFirst, dhcpLast = "172.31.250.150", "172.31.250.159"
	dhcpNAD             = `{"apiVersion":"k8s.cni.cncf.io/v1","kind":"NetworkAttachmentDefinition",
"metadata":{"name":"dhcpnet","namespace":"default"},
"spec":{"config":"{\"cniVersion\":\"1.0.0\",\"name\":\"dhcpnet\",\"type\":\"macvlan\",\"master\":\"eth0\",\"mode\":\"bridge\",\"ipam\":{\"type\":\"dhcp\"}}"}}`
)

// dhcpServer is dnsmasq serving DHCP on the cluster's underlay bridge.
type dhcpServer struct {
	cmd    *exec.Cmd
	leases string
	log    *bytes.Buffer
}

// startDHCPServer runs dnsmasq in the cluster's network namespace on br0,
// handing out dhcpFirst to dhcpLast, until the test ends.
func startDHCPServer(t *testing.T, c *cluster) *dhcpServer {
	t.Helper()
	if _, err := exec.LookPath("dnsmasq"); err != nil {
		t.Fatalf("dnsmasq: %v (apt-get install dnsmasq-base)", err)
	}
	s := &dhcpServer{leases: filepath.Join(t.TempDir(), "leases"), log: &bytes.Buffer{}}
	s.cmd = exec.Command("nsenter", "--net=/proc/"+strconv.Itoa(c.init)+"/ns/net", "dnsmasq", "--no-daemon", "--conf-file=/dev/null",
		"--port=0", "--interface=br0", "--bind-interfaces", "--dhcp-authoritative", "--log-dhcp", "--pid-file=",
		"--dhcp-range="+dhcpFirst+","+dhcpLast+",255.255.255.0,2m", "--dhcp-leasefile="+s.leases)
	s.cmd.Stdout, s.cmd.Stderr = s.log, s.log
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.cmd.Process.Kill()
		s.cmd.Wait()
		if t.Failed() {
			t.Logf("dnsmasq log:\n%s", s.log)
		}
	})
	return s
}

// leased reports whether the lease file holds addr.
func (s *dhcpServer) leased(addr string) bool {
	b, _ := os.ReadFile(s.leases)
	return strings.Contains(string(b), " "+addr+" ")
}

// checkDHCPPod: a pod naming dhcpnet gets an address of the server's
// range on net1 (the daemon entered its namespace, which was made after
// the daemon started), network-status says so, and deleting the pod
// releases the lease.
func checkDHCPPod(t *testing.T, c *cluster, s *dhcpServer) {
	c.apply(dhcpNAD)
	c.apply(podManifest("pod-dhcp", map[string]string{"k8s.v1.cni.cncf.io/networks": `[{"name":"dhcpnet"}]`}))
	c.must("wait", "--for=condition=Ready", c.timeout(), "pod/pod-dhcp")
	p := getPod(t, c.node, "pod-dhcp")
	var st []fullStatus
	if err := json.Unmarshal([]byte(p.Annotations["k8s.v1.cni.cncf.io/network-status"]), &st); err != nil || len(st) != 2 || len(st[1].IPs) != 1 {
		t.Fatalf("pod-dhcp's network-status: %q (%v), want the primary and dhcpnet with one address", p.Annotations["k8s.v1.cni.cncf.io/network-status"], err)
	}
	addr, err := netip.ParseAddr(st[1].IPs[0])
	first, last := netip.MustParseAddr(dhcpFirst), netip.MustParseAddr(dhcpLast)
	if err != nil || st[1].Name != "default/dhcpnet" || st[1].Interface != "net1" || addr.Less(first) || last.Less(addr) {
		t.Fatalf("pod-dhcp's dhcpnet: %+v, want net1 with an address of %s to %s", st[1], dhcpFirst, dhcpLast)
	}
	if out := c.must("exec", "pod-dhcp", "--", "ip", "-o", "-4", "addr", "show", "dev", "net1"); !strings.Contains(out, " "+addr.String()+"/24 ") {
		t.Errorf("pod-dhcp's net1 lacks %s/24: %s", addr, out)
	}
	c.must("exec", "pod-dhcp", "--", "ping", "-c", "1", "-W", "5", clusterUplink)
	if !s.leased(addr.String()) {
		t.Errorf("dnsmasq's leases lack %s", addr)
	}
	c.must("delete", "pod", "pod-dhcp", "--wait", c.timeout())
	c.poll(addr.String()+" released to the DHCP server", func() error {
		if s.leased(addr.String()) {
			return fmt.Errorf("still in dnsmasq's leases")
		}
		return nil
	})
}
