//go:build kube

package node

import (
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

// The LoadBalancer part of the services configuration (issue 64 item 5):
// cnibox's LoadBalancer IPAM and announcements on (the chart's
// loadBalancerIPAM.enabled and loadBalancerAnnounce.enabled), a
// LoadBalancerIPPool of the nodes' LAN, and Kubernetes' own LoadBalancers
// specs that need no cloud (docs/conformance.md says which and why the
// others cannot run).
const (
	// lbPool is the pool's block: addresses of the underlay's /24 (the
	// bridge br0 in the control plane's namespace, clusterUplink .1, the
	// nodes .11 to .13) that no node has; the first and last are left out
	// (.193 to .222).
	lbPool = "172.31.250.192/27"
	// lbClient is the address the control plane's namespace (where the e2e
	// binary runs) sends from to the pool's addresses: a client routed to
	// the LAN from elsewhere, outside the nodes' /16 (the ESIPP specs
	// check that the client's address arrives by it not being in the /16
	// of a node's InternalIP, a cloud's flat network; from clusterUplink
	// they would fail whether kept or not). The nodes reach it by their
	// default route, clusterUplink.
	lbClient = "198.51.100.1"
)

// lbPoolManifest is the pool the services configuration gives the
// LoadBalancer Services.
const lbPoolManifest = `apiVersion: cnibox.io/v1alpha1
kind: LoadBalancerIPPool
metadata:
  name: conformance
spec:
  blocks:
  - cidr: ` + lbPool + `
`

// lbCRD is the chart's LoadBalancerIPPool CRD: `helm install` installs
// its crds/, `helm template` (the configuration's rendering) leaves them
// out.
func lbCRD() (string, error) {
	data, err := os.ReadFile(filepath.Join(chartDir, "crds", "loadbalancerippool-crd.yaml"))
	if err != nil {
		return "", fmt.Errorf("the chart's LoadBalancerIPPool CRD: %w", err)
	}
	return string(data), nil
}

// lbCheckManifest is the harness's own check of a LoadBalancer Service:
// agnhost netexec (HTTP on 8080, UDP on 8081) behind a Service of type
// LoadBalancer with TCP port 80 and UDP port 90.
const lbCheckManifest = `apiVersion: v1
kind: Namespace
metadata:
  name: lb-check
---
apiVersion: v1
kind: Pod
metadata:
  name: netexec
  namespace: lb-check
  labels: {app: lb-check}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: netexec
    image: ` + agnhostImage + `
    imagePullPolicy: Never
    args: ["netexec", "--http-port=8080", "--udp-port=8081"]
    readinessProbe:
      httpGet: {path: /healthz, port: 8080}
      periodSeconds: 1
---
apiVersion: v1
kind: Service
metadata:
  name: lb-check
  namespace: lb-check
spec:
  type: LoadBalancer
  selector: {app: lb-check}
  ports:
  - {name: tcp, protocol: TCP, port: 80, targetPort: 8080}
  - {name: udp, protocol: UDP, port: 90, targetPort: 8081}
`

// startLB readies the services configuration's LoadBalancers: the pool,
// lbClient and its route in the control plane's namespace, then checks,
// as a client outside the cluster, that a LoadBalancer Service gets an
// address of the pool and answers on it over TCP and UDP (deleted after).
func (c *cluster) startLB() {
	t := c.t
	t.Helper()
	step(t, "LoadBalancer: the pool and a client on the underlay", func() {
		c.apply(lbPoolManifest)
		for _, args := range [][]string{
			{"ip", "addr", "replace", lbClient + "/32", "dev", "lo"},
			{"ip", "route", "replace", lbPool, "dev", "br0", "src", lbClient},
		} {
			c.mustOnNode(args...)
		}
		c.apply(lbCheckManifest)
		pool := netip.MustParsePrefix(lbPool)
		var addr netip.Addr
		c.poll("the Service lb-check has an address of the pool", func() error {
			out, err := c.kubectl("-n", "lb-check", "get", "service", "lb-check", "-o", "jsonpath={.status.loadBalancer.ingress[*].ip}")
			if err != nil {
				return err
			}
			a, err := netip.ParseAddr(strings.TrimSpace(out))
			if err != nil {
				return fmt.Errorf("ingress %q: %w", out, err)
			}
			if !pool.Contains(a) {
				return fmt.Errorf("ingress %s is outside the pool %s", a, pool)
			}
			addr = a
			return nil
		})
		t.Logf("lb-check: %s", addr)
		c.poll("TCP to "+addr.String()+":80 from the underlay", func() error {
			out, err := c.onNode("curl", "-sS", "--max-time", "3", "http://"+addr.String()+"/hostname")
			if err != nil {
				return err
			}
			if strings.TrimSpace(out) != "netexec" {
				return fmt.Errorf("answered %q, want the pod's name netexec", out)
			}
			return nil
		})
		c.poll("UDP to "+addr.String()+":90 from the underlay", func() error {
			cmd := exec.Command("nsenter", "-t", strconv.Itoa(c.init), "-n", "-m", "nc", "-u", "-w", "2", addr.String(), "90")
			out, err := run(cmd, "hostname\n")
			if strings.TrimSpace(out) == "netexec" {
				return nil
			}
			return fmt.Errorf("answered %q (%v), want the pod's name netexec", out, err)
		})
		c.must("delete", "namespace", "lb-check", c.timeout())
	})
}
