package e2e

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nstest"
)

// The example network of examples/85-portmap.conflist.
var (
	pmGateway4 = netip.MustParseAddr("10.88.85.1")
	pmGateway6 = netip.MustParseAddr("fd00:88:85::1")
	pmLocal    = netip.MustParseAddr("127.0.0.1")
)

// TestPortmapExample runs the example portmap network (bridge, host-local,
// portmap) through libcni at every spec version, with the portMappings
// capability as runtimes pass it: the pod's HTTP server is reached on the
// host port from the node (127.0.0.1 and the node's addresses) and from the
// pod itself; CHECK passes; GC drops a stale pod's mapping; after DEL
// (twice) the host port leads nowhere and no element is left.
func TestPortmapExample(t *testing.T) {
	for i, v := range specVersions {
		t.Run(v, func(t *testing.T) {
			e := newEnv(t)
			pmNoDAD(t)
			l := withVersion(t, loadList(t, repoFile("examples", "85-portmap.conflist")), v)
			port := 18080 + i
			p := e.newPod("web")
			p.rt.CapabilityArgs = pmCapability(port)
			res := e.add(l, p)
			pmServe(t, p.netns, p.id)

			for _, to := range []netip.Addr{pmLocal, pmGateway4, pmGateway6} {
				if body, err := pmFetch(t, "", to, port); err != nil || body != p.id {
					t.Errorf("from the node: GET %s:%d = %q, %v; want %q", to, port, body, err, p.id)
				}
			}
			for _, to := range []netip.Addr{pmGateway4, pmGateway6} {
				if body, err := pmFetch(t, p.netns, to, port); err != nil || body != p.id {
					t.Errorf("hairpin: GET %s:%d from the pod = %q, %v", to, port, body, err)
				}
			}
			if v >= "0.4.0" {
				if err := e.cni.CheckNetworkList(context.Background(), l, p.rt); err != nil {
					t.Errorf("CHECK: %v", err)
				}
			}
			if v == "1.1.0" {
				stale := e.newPod("stale")
				stale.rt.CapabilityArgs = pmCapability(port + 100)
				e.add(l, stale)
				keep := []types.GCAttachment{{ContainerID: p.id, IfName: "eth0"}}
				if err := e.cni.GCNetworkList(context.Background(), l, &libcni.GCArgs{ValidAttachments: keep}); err != nil {
					t.Fatalf("GC: %v", err)
				}
				if owners := pmOwners(t); len(owners) != 1 || !strings.Contains(owners[0], p.id) {
					t.Errorf("portmap owners after GC = %v; want only %s", owners, p.id)
				}
				if body, err := pmFetch(t, "", pmLocal, port); err != nil || body != p.id {
					t.Errorf("after GC: GET 127.0.0.1:%d = %q, %v", port, body, err)
				}
				e.del(l, stale)
			}
			pmCheckResult(t, res, p)
			e.del(l, p)
			e.del(l, p)
			if body, err := pmFetch(t, "", pmLocal, port); err == nil {
				t.Errorf("after DEL: GET 127.0.0.1:%d reached %q", port, body)
			}
			if owners := pmOwners(t); len(owners) != 0 {
				t.Errorf("portmap elements after DEL: %v", owners)
			}
		})
	}
}

// TestPodmanPortmap: podman `-p HOSTPORT:80` on the example portmap network;
// busybox httpd in the container is reached on 127.0.0.1 and on the node's
// address, and the mapping is gone after podman rm.
func TestPodmanPortmap(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	e := newEnv(t)
	pmNoDAD(t)
	confDir := t.TempDir()
	b, err := os.ReadFile(repoFile("examples", "85-portmap.conflist"))
	must(t, err)
	must(t, os.WriteFile(filepath.Join(confDir, "portmapnet.conflist"), b, 0o644))
	p := newPodman(t, e.binDir, confDir)
	p.importBusybox("localhost/cnibox-busybox")

	const hostPort = 18480
	p.mustRun("run", "-d", "--name", "web", "--network", "portmapnet", "-p", fmt.Sprintf("%d:80", hostPort),
		"localhost/cnibox-busybox", "httpd", "-f", "-p", "80", "-h", "/www")
	for _, to := range []netip.Addr{pmLocal, pmGateway4} {
		var (
			body string
			err  error
		)
		deadline := time.Now().Add(10 * time.Second) // httpd starts in the background
		for {
			body, err = pmFetchRaw(to, hostPort)
			if (err == nil && strings.Contains(body, "hello from cnibox")) || time.Now().After(deadline) {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		if err != nil || !strings.Contains(body, "hello from cnibox") {
			t.Errorf("GET %s:%d = %q, %v; want busybox httpd's page", to, hostPort, body, err)
		}
	}
	if owners := pmOwners(t); len(owners) != 1 {
		t.Errorf("portmap owners while web runs = %v; want one", owners)
	}
	p.mustRun("rm", "-f", "-t", "0", "web")
	if owners := pmOwners(t); len(owners) != 0 {
		t.Errorf("portmap elements after podman rm: %v", owners)
	}
	if body, err := pmFetchRaw(pmLocal, hostPort); err == nil {
		t.Errorf("after podman rm: GET 127.0.0.1:%d reached %q", hostPort, body)
	}
}

func pmCapability(hostPort int) map[string]any {
	return map[string]any{"portMappings": []map[string]any{{"hostPort": hostPort, "containerPort": 80, "protocol": "tcp"}}}
}

// pmNoDAD turns off duplicate address detection for the links the test
// creates on the node (restored at the end): a forwarded first packet that
// meets a link-local address still tentative is lost by the kernel's
// neighbour discovery, which would show as a flaky timeout.
func pmNoDAD(t *testing.T) {
	h := hostHandle(t)
	for _, k := range []string{"net.ipv6.conf.all.accept_dad", "net.ipv6.conf.default.accept_dad"} {
		old, err := h.Sysctl(k)
		must(t, err)
		must(t, h.SetSysctl(k, "0"))
		t.Cleanup(func() {
			h, err := netops.Open("")
			if err == nil {
				h.SetSysctl(k, old)
				h.Close()
			}
		})
	}
}

// pmServe runs an HTTP server on :80 in the pod that answers with body.
func pmServe(t *testing.T, ns, body string) {
	t.Helper()
	var ln net.Listener
	must(t, nstest.Run(t, ns, func() error {
		var err error
		ln, err = net.Listen("tcp", ":80")
		return err
	}))
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, body) })}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
}

// pmFetch GETs http://to:port/ from namespace ns ("" = the node).
func pmFetch(t *testing.T, ns string, to netip.Addr, port int) (string, error) {
	t.Helper()
	if ns == "" {
		return pmFetchRaw(to, port)
	}
	var (
		body string
		err  error
	)
	if rerr := nstest.Run(t, ns, func() error { body, err = pmFetchRaw(to, port); return nil }); rerr != nil {
		return "", rerr
	}
	return body, err
}

// pmFetchRaw GETs http://to:port/ from the calling thread's namespace.
func pmFetchRaw(to netip.Addr, port int) (string, error) {
	c, err := net.DialTimeout("tcp", netip.AddrPortFrom(to, uint16(port)).String(), 3*time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(3 * time.Second))
	fmt.Fprintf(c, "GET / HTTP/1.0\r\nHost: %s\r\n\r\n", to)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var sb strings.Builder
	_, err = bufio.NewReader(resp.Body).WriteTo(&sb)
	return sb.String(), err
}

// pmOwners returns the owners of the portmap elements on the node.
func pmOwners(t *testing.T) []string {
	t.Helper()
	h := hostHandle(t)
	es, err := h.NFT().PortMapEntries()
	must(t, err)
	var out []string
	for _, e := range es {
		out = append(out, e.Owner)
	}
	return out
}

// pmCheckResult: the chain's result is the bridge's, with the pod's
// interface in its netns (portmap passes prevResult on unchanged).
func pmCheckResult(t *testing.T, res *current.Result, p *pod) {
	t.Helper()
	found := false
	for _, ifc := range res.Interfaces {
		found = found || (ifc.Name == "eth0" && ifc.Sandbox == p.netns)
	}
	if !found || len(res.IPs) != 2 {
		t.Errorf("ADD result through portmap = %+v; want the bridge's result (eth0 in %s, two addresses)", res, p.netns)
	}
}
