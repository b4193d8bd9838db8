package dhcp_test

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cnibox/cnibox/netops/nstest"
	"github.com/cnibox/cnibox/roles/dhcp"
	"github.com/cnibox/cnibox/roles/dhcp/daemon"
	"github.com/cnibox/cnibox/roles/internal/roletest"
	"github.com/cnibox/cnibox/roles/macvlan"
)

// daemonEnv makes the test binary run the daemon instead of the tests (when
// CNIBOX_BIN does not name a built cnibox).
const daemonEnv = "CNIBOX_TEST_DHCP_DAEMON"

// TestMain runs the tests in a private namespace that stands for the node;
// re-executed with daemonEnv set, the test binary is the daemon.
func TestMain(m *testing.M) {
	if os.Getenv(daemonEnv) == "1" {
		os.Exit(daemon.Main(os.Args[2:])) // os.Args[1] is "daemon"
	}
	nstest.MainInPrivateNetns(m)
}

// The LAN: a namespace with dnsmasq (10.56.0.1) behind a veth whose node
// end (lan0) stands in for the node's NIC.
const (
	lanRouter = "10.56.0.1"
	lanDNS    = "10.56.0.53"
)

// lan is the LAN namespace and its DHCP server.
type lan struct {
	t         *testing.T
	ns        string
	leaseFile string
	log       *bytes.Buffer
	cmd       *exec.Cmd
}

// newLAN creates the LAN namespace, the node's NIC lan0 (up, no address)
// and starts dnsmasq with 2-minute leases, option 121 and DNS, and the
// extra dnsmasq options given.
func newLAN(t *testing.T, extra ...string) *lan {
	t.Helper()
	dnsmasq := nstest.RequireProgram(t, "dnsmasq", "dnsmasq-base")
	l := &lan{t: t, ns: roletest.NewLAN(t, []string{lanRouter + "/24"}, nil).NS, leaseFile: filepath.Join(t.TempDir(), "leases"), log: &bytes.Buffer{}}
	l.cmd = exec.Command(dnsmasq, "--no-daemon", "--conf-file=/dev/null", "--user=root", "--group=root",
		"--port=0", "--interface=eth0", "--bind-interfaces", "--pid-file=", "--log-dhcp", "--log-facility=-",
		"--dhcp-authoritative", "--no-ping", "--dhcp-range=10.56.0.100,10.56.0.199,255.255.255.0,2m",
		"--dhcp-leasefile="+l.leaseFile,
		"--dhcp-option=option:router,"+lanRouter,
		"--dhcp-option=option:dns-server,"+lanDNS,
		"--dhcp-option=option:domain-name,lan.test",
		"--dhcp-option=option:classless-static-route,192.168.56.0/24,10.56.0.254,0.0.0.0/0,"+lanRouter)
	l.cmd.Args = append(l.cmd.Args, extra...)
	l.cmd.Stdout, l.cmd.Stderr = l.log, l.log
	if err := nstest.Run(t, l.ns, l.cmd.Start); err != nil {
		t.Fatalf("start dnsmasq: %v", err)
	}
	t.Cleanup(l.stop)
	// Ready when its DHCP socket (port 67, 0x0043) is bound.
	udp := fmt.Sprintf("/proc/%d/net/udp", l.cmd.Process.Pid)
	deadline := time.Now().Add(20 * time.Second)
	for {
		b, _ := os.ReadFile(udp)
		if strings.Contains(string(b), ":0043 ") {
			return l
		}
		if time.Now().After(deadline) {
			t.Fatalf("dnsmasq does not listen on port 67")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stop ends dnsmasq (the server gone).
func (l *lan) stop() {
	if l.cmd.ProcessState == nil {
		l.cmd.Process.Kill()
		l.cmd.Wait()
	}
	if l.t.Failed() {
		l.t.Logf("dnsmasq log:\n%s", l.log)
	}
}

// leases returns the server's lease file: IP -> the line.
func (l *lan) leases() map[string]string {
	out := map[string]string{}
	b, err := os.ReadFile(l.leaseFile)
	if err != nil && !os.IsNotExist(err) {
		l.t.Fatal(err)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) >= 3 {
			out[f[2]] = sc.Text()
		}
	}
	return out
}

// waitLeases polls the lease file until ok accepts it.
func (l *lan) waitLeases(what string, ok func(map[string]string) bool) map[string]string {
	l.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		got := l.leases()
		if ok(got) {
			return got
		}
		if time.Now().After(deadline) {
			l.t.Fatalf("the server's lease file: %s: %v", what, got)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// dhcpDaemon is a running `dhcp daemon`.
type dhcpDaemon struct {
	t      *testing.T
	socket string
	data   string
	log    *bytes.Buffer
	cmd    *exec.Cmd
}

// startDaemon runs `dhcp daemon` (the built cnibox through a dhcp symlink
// when CNIBOX_BIN is set, else this test binary) on a socket in dir, with
// its store in dir/data, and waits until it answers.
func startDaemon(t *testing.T, dir string, extra ...string) *dhcpDaemon {
	t.Helper()
	return startDaemonUnder(t, nil, dir, extra...)
}

// startDaemonUnder is startDaemon with the daemon's command run by wrap
// (a program and its arguments, before the daemon's; nil: none).
func startDaemonUnder(t *testing.T, wrap []string, dir string, extra ...string) *dhcpDaemon {
	t.Helper()
	d := &dhcpDaemon{t: t, socket: filepath.Join(dir, "dhcp.sock"), data: filepath.Join(dir, "data"), log: &bytes.Buffer{}}
	args := append([]string{"daemon", "-socketpath", d.socket, "-datadir", d.data, "-timeout", "10s"}, extra...)
	if bin := os.Getenv("CNIBOX_BIN"); bin != "" {
		link := filepath.Join(dir, "dhcp")
		if _, err := os.Lstat(link); err != nil {
			if err := os.Symlink(bin, link); err != nil {
				t.Fatal(err)
			}
		}
		d.cmd = exec.Command(link, args...)
	} else {
		d.cmd = exec.Command(os.Args[0], args...)
		d.cmd.Env = append(os.Environ(), daemonEnv+"=1")
	}
	var err error
	if wrap != nil {
		bin := d.cmd.Path
		if bin == "/proc/self/exe" { // this test binary, re-executed in its namespace
			if bin, err = os.Executable(); err != nil {
				t.Fatal(err)
			}
		}
		d.cmd.Args = append(slices.Clone(wrap), append([]string{bin}, d.cmd.Args[1:]...)...)
		d.cmd.Path = wrap[0]
		if lp, err := exec.LookPath(wrap[0]); err == nil {
			d.cmd.Path = lp
		}
	}
	d.cmd.Stdout, d.cmd.Stderr = d.log, d.log
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.kill)
	deadline := time.Now().Add(20 * time.Second)
	for {
		if c, err := net.Dial("unix", d.socket); err == nil {
			c.Close()
			return d
		}
		if time.Now().After(deadline) {
			t.Fatalf("the daemon does not listen on %s: %s", d.socket, d.log)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// kill ends the daemon with SIGKILL (no chance to clean up).
func (d *dhcpDaemon) kill() {
	if d.cmd.ProcessState == nil {
		d.cmd.Process.Signal(syscall.SIGKILL)
		d.cmd.Wait()
	}
	if d.t.Failed() {
		d.t.Logf("daemon log:\n%s", d.log)
	}
}

func newNode(t *testing.T) *roletest.Node {
	return roletest.NewNode(t, macvlan.Role, dhcp.Role)
}

// conf is a macvlan network on lan0 whose IPAM is dhcp on socket.
func conf(v, socket, extra string) []byte {
	return []byte(fmt.Sprintf(`{"cniVersion":%q,"name":"lannet","type":"macvlan","master":"lan0",
		"ipam":{"type":"dhcp","daemonSocketPath":%q%s}}`, v, socket, extra))
}
