package reliability

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cnibox/cnibox/store"
)

// hostileConf is a valid bridge config with a few fields replaced.
func hostileConf(t testing.TB, edit func(m map[string]any)) []byte {
	t.Helper()
	m := map[string]any{
		"cniVersion": "1.1.0", "name": "hostile", "type": "bridge", "bridge": "cbxhostile0",
		"isGateway": true, "ipMasq": true,
		"ipam": map[string]any{"type": "host-local", "ranges": []any{[]any{map[string]any{"subnet": "10.95.0.0/24"}}}},
	}
	if edit != nil {
		edit(m)
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func ipamRanges(subnets ...string) func(m map[string]any) {
	return func(m map[string]any) {
		var set []any
		for _, s := range subnets {
			set = append(set, map[string]any{"subnet": s})
		}
		m["ipam"].(map[string]any)["ranges"] = []any{set}
	}
}

// TestHostileInput runs the built binary on hostile input: each case must
// fail with its documented error code, and leave nothing behind (no
// reservation, endpoint record, veth, masquerade entry or MAC spoof chain).
func TestHostileInput(t *testing.T) {
	n := newNode(t, plainBin(t))
	tmp := t.TempDir()
	regular := filepath.Join(tmp, "regular-file")
	if err := os.WriteFile(regular, []byte("not a namespace"), 0o600); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(tmp, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	// A name cnibox has no role for, linked as a runtime would find it.
	if err := os.Symlink(n.bin, filepath.Join(n.binDir, "win-bridge")); err != nil {
		t.Fatal(err)
	}
	// A data directory whose store is a symlink to another node's store.
	victimDir, linkedDir := t.TempDir(), t.TempDir()
	if st, err := store.Open(victimDir); err != nil {
		t.Fatal(err)
	} else {
		st.Close()
	}
	if err := os.Symlink(filepath.Join(victimDir, "cnibox.db"), filepath.Join(linkedDir, "cnibox.db")); err != nil {
		t.Fatal(err)
	}
	netns := newNS(t)
	pad := strings.Repeat("x", 5<<20)
	deep := strings.Repeat("[", 100000) + strings.Repeat("]", 100000)

	type tc struct {
		name   string
		role   string // default bridge
		verb   string // default ADD
		stdin  []byte
		cid    string // default a fresh one
		ifname string // default eth0
		netns  string // default a fresh namespace
		args   string
		want   uint
	}
	set := func(k string, v any) func(m map[string]any) { return func(m map[string]any) { m[k] = v } }
	setIPAM := func(k string, v any) func(m map[string]any) {
		return func(m map[string]any) { m["ipam"].(map[string]any)[k] = v }
	}
	cases := []tc{
		{name: "oversized JSON (5 MiB)", stdin: []byte(`{"cniVersion":"1.1.0","name":"hostile","type":"bridge","pad":"` + pad + `"}`), want: 6},
		{name: "deeply nested JSON (100k levels)", stdin: []byte(`{"cniVersion":"1.1.0","name":"hostile","type":"bridge","x":` + deep + `}`), want: 6},
		{name: "deeply nested prevResult", verb: "DEL", stdin: []byte(`{"cniVersion":"1.1.0","name":"hostile","type":"bridge","prevResult":` + deep + `}`), want: 6},
		{name: "not JSON", stdin: []byte("\x00\x01\x02garbage"), want: 6},
		{name: "empty stdin", stdin: []byte{}, want: 6},
		{name: "invalid UTF-8 in the network name", stdin: []byte("{\"cniVersion\":\"1.1.0\",\"name\":\"n\xff\xfe\",\"type\":\"bridge\"}"), want: 7},
		// JSON decoding turns invalid UTF-8 into U+FFFD, a name the kernel
		// takes: the ADD works, as with the reference plugin.
		{name: "invalid UTF-8 in the bridge name", stdin: []byte("{\"cniVersion\":\"1.1.0\",\"name\":\"hostile\",\"type\":\"bridge\",\"bridge\":\"br\xff\",\"ipam\":{\"type\":\"host-local\",\"subnet\":\"10.95.1.0/24\"}}"), want: 0},
		{name: "unknown cniVersion 9.9.9", stdin: hostileConf(t, set("cniVersion", "9.9.9")), want: 1},
		{name: "cniVersion 0.2.0", stdin: hostileConf(t, set("cniVersion", "0.2.0")), want: 1},
		{name: "cniVersion of the wrong type", stdin: hostileConf(t, set("cniVersion", 1)), want: 6},
		{name: "CHECK with cniVersion 0.3.1", verb: "CHECK", stdin: hostileConf(t, set("cniVersion", "0.3.1")), want: 1},
		{name: "path traversal in the container ID", cid: "../../etc/passwd", want: 4},
		{name: "path traversal in the network name", stdin: hostileConf(t, set("name", "../../etc")), want: 7},
		{name: "path traversal in the ifname", ifname: "../eth0", want: 4},
		{name: "ifname ..", ifname: "..", want: 4},
		{name: "ifname of 16 bytes", ifname: "0123456789abcdef", want: 4},
		{name: "ifname of 9 characters, 18 bytes", ifname: "ééééééééé", want: 4},
		{name: "container ID of 100 kB", cid: strings.Repeat("c", 100<<10), want: 4},
		{name: "IPAM type with a path", stdin: hostileConf(t, setIPAM("type", "../../../bin/true")), want: 7},
		{name: "netns is a regular file", netns: regular, want: 3},
		{name: "netns is a directory", netns: tmp, want: 3},
		{name: "netns is a FIFO", netns: fifo, want: 3},
		{name: "netns is a mount namespace", netns: "/proc/self/ns/mnt", want: 3},
		{name: "netns does not exist", netns: filepath.Join(tmp, "nope"), want: 3},
		{name: "ifname lo exists in the pod", ifname: "lo", want: 101},
		{name: "overlapping ranges", stdin: hostileConf(t, ipamRanges("10.95.0.0/24", "10.95.0.128/25")), want: 7},
		{name: "overlapping range sets", stdin: hostileConf(t, func(m map[string]any) {
			m["ipam"].(map[string]any)["ranges"] = []any{[]any{map[string]any{"subnet": "10.95.0.0/24"}}, []any{map[string]any{"subnet": "10.95.0.0/25"}}}
		}), want: 7},
		{name: "a /32 subnet", stdin: hostileConf(t, ipamRanges("10.95.0.7/32")), want: 7},
		{name: "an IPv6 /128 subnet", stdin: hostileConf(t, ipamRanges("fd95::7/128")), want: 7},
		{name: "a /31 subnet (no gateway left)", stdin: hostileConf(t, ipamRanges("10.95.0.6/31")), want: 7},
		{name: "rangeStart after rangeEnd", stdin: hostileConf(t, func(m map[string]any) {
			m["ipam"].(map[string]any)["ranges"] = []any{[]any{map[string]any{"subnet": "10.95.0.0/24", "rangeStart": "10.95.0.200", "rangeEnd": "10.95.0.100"}}}
		}), want: 7},
		{name: "rangeFromFile /dev/zero", stdin: hostileConf(t, func(m map[string]any) {
			m["ipam"] = map[string]any{"type": "host-local", "rangeFromFile": "/dev/zero"}
		}), want: 7},
		{name: "rangeFromFile a FIFO", stdin: hostileConf(t, func(m map[string]any) {
			m["ipam"] = map[string]any{"type": "host-local", "rangeFromFile": fifo}
		}), want: 7},
		{name: "resolvConf /dev/zero", stdin: hostileConf(t, setIPAM("resolvConf", "/dev/zero")), want: 7},
		{name: "resolvConf a directory", stdin: hostileConf(t, setIPAM("resolvConf", tmp)), want: 7},
		{name: "dataDir under a file", stdin: hostileConf(t, setIPAM("dataDir", filepath.Join(regular, "db"))), want: 5},
		{name: "MAC of the wrong form", stdin: hostileConf(t, set("runtimeConfig", map[string]any{"mac": "zz:zz:zz"})), want: 7},
		{name: "requested IP not an IP", args: "IP=10.95.0.300", want: 7},
		{name: "requested IP outside the ranges", args: "IP=192.0.2.1", want: 7},
		{name: "unknown CNI_ARGS key", args: "FOO=bar", want: 4},
		{name: "CNI_ARGS of 100 kB", args: "IgnoreUnknown=1;K8S_POD_NAME=" + strings.Repeat("p", 100<<10), want: 0},
		{name: "MTU out of range", stdin: hostileConf(t, set("mtu", 70000)), want: 7},
		{name: "VLAN out of range", stdin: hostileConf(t, set("vlan", 5000)), want: 7},
		{name: "vlanTrunk minID above maxID", stdin: hostileConf(t, set("vlanTrunk", []any{map[string]any{"minID": 9, "maxID": 3}})), want: 7},
		{name: "prevResult not a result", verb: "DEL", stdin: hostileConf(t, set("prevResult", "garbage")), want: 6},
		{name: "unknown CNI_COMMAND", verb: "EXPLODE", want: 4},
		{name: "a name cnibox has no role for (win-bridge), VERSION", role: "win-bridge", verb: "VERSION", want: 4},
		{name: "a name cnibox has no role for (win-bridge), ADD", role: "win-bridge", want: 4},
		{name: "cloud-ipam pool file a FIFO", stdin: hostileConf(t, func(m map[string]any) {
			m["ipam"] = map[string]any{"type": "cloud-ipam", "provider": "file", "endpoint": fifo}
		}), want: 11},
		{name: "the store file a symlink", stdin: hostileConf(t, setIPAM("dataDir", linkedDir)), want: 5},
		{name: "host-local: a /32 subnet", role: "host-local", stdin: hostileConf(t, ipamRanges("10.95.0.7/32")), want: 7},
		{name: "static: address of /33", role: "static", stdin: hostileConf(t, func(m map[string]any) {
			m["ipam"] = map[string]any{"type": "static", "addresses": []any{map[string]any{"address": "10.95.0.1/33"}}}
		}), want: 7},
		{name: "loopback: netns is a regular file", role: "loopback", netns: regular, want: 3},
	}
	parent := t
	var table []string
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			n.t = t
			defer func() { n.t = parent }()
			if c.role == "" {
				c.role = "bridge"
			}
			if c.verb == "" {
				c.verb = "ADD"
			}
			if c.stdin == nil {
				c.stdin = hostileConf(t, nil)
			}
			if c.cid == "" {
				c.cid = uniq("hostile")
			}
			if c.ifname == "" {
				c.ifname = "eth0"
			}
			if c.netns == "" {
				c.netns = netns
			}
			r := n.run(call{role: c.role, verb: c.verb, conf: c.stdin, cid: c.cid, netns: c.netns, ifname: c.ifname, args: c.args})
			if r.code != c.want || r.killed {
				t.Errorf("%s %s: %s, want code %d", c.role, c.verb, r, c.want)
			}
			if c.want == 0 && r.code == 0 {
				a := &attachment{cid: c.cid, ifname: c.ifname, netns: c.netns, prev: r.out, ips: resultIPs(t, r.out)}
				n.del(c.role, c.stdin, a, c.netns)
			}
			n.assertNothing()
			msg := r.msg
			if len(msg) > 160 {
				msg = msg[:160] + "..."
			}
			table = append(table, fmt.Sprintf("| %s | %s %s | %d | %s |", c.name, c.role, c.verb, r.code, strings.ReplaceAll(msg, "|", "\\|")))
		})
	}
	n.t = t
	t.Logf("hostile inputs (%d):\n%s", len(cases), strings.Join(table, "\n"))
}

// assertNothing fails the test unless the node holds no reservation or
// endpoint record in any network, no cbx veth, no masquerade entry and no
// MAC spoof chain, and the store (if any) is sound.
func (n *node) assertNothing() {
	n.t.Helper()
	st, err := store.OpenWith(n.dataDir, store.Options{NoCreate: true})
	if err == nil {
		rep, err := st.Check()
		st.Close()
		if err != nil {
			n.t.Fatal(err)
		}
		for _, p := range rep.Problems {
			n.t.Errorf("store check: %s", p)
		}
		if rep.Endpoints != 0 {
			n.t.Errorf("%d endpoint records left", rep.Endpoints)
		}
		for _, nw := range rep.Networks {
			if nw.Reservations != 0 {
				n.t.Errorf("network %s: %d reservations left", nw.Name, nw.Reservations)
			}
		}
	}
	s := n.state("hostile", "cbxhostile0")
	for v := range s.allVeths {
		if strings.HasPrefix(v, "cbx") {
			n.t.Errorf("veth %s left", v)
		}
	}
	if len(s.masq) > 0 || len(s.spoof) > 0 {
		n.t.Errorf("masquerade entries %v, MAC spoof chains %v left", s.masq, s.spoof)
	}
}

// TestNetnsVanishesMidADD stops an ADD after IPAM (fault point in stop
// mode), deletes the pod's namespace, and lets the ADD go on: whatever the
// ADD answers, a DEL without netns (what the runtime sends once the
// namespace is gone) leaves nothing behind.
func TestNetnsVanishesMidADD(t *testing.T) {
	for _, point := range []string{"bridge/add/after-ipam", "bridge/add/after-veth", "bridge/add/after-addresses"} {
		t.Run(point, func(t *testing.T) {
			n := newNode(t, faultBin(t))
			conf := hostileConf(t, set2("macspoofchk", true))
			netns := newNS(t)
			cid := uniq("vanish")
			resume := n.runStopped(t, call{role: "bridge", verb: "ADD", conf: conf, cid: cid, netns: netns, ifname: "eth0"}, point)
			removeNS(t, netns)
			r := resume()
			t.Logf("ADD with the namespace gone at %s: %s", point, r)
			if r.killed || (r.code != 0 && r.code != 3 && r.code != 5) {
				t.Errorf("ADD: %s, want success or code 3 or 5", r)
			}
			a := &attachment{cid: cid, ifname: "eth0"}
			if r.code == 0 {
				a.prev = r.out
			}
			n.del("bridge", conf, a, "")
			n.assertNothing()
		})
	}
}

func set2(k string, v any) func(m map[string]any) { return func(m map[string]any) { m[k] = v } }

// runStopped starts the call with its fault point set to stop there and
// returns once the plugin has stopped at it (the test fails if the call ends
// first); resume continues the plugin and returns its result.
func (n *node) runStopped(t *testing.T, c call, point string) (resume func() result) {
	t.Helper()
	c.env = append(c.env, "CNIBOX_FAULT="+point+":stop")
	done := make(chan result, 1)
	go func() { done <- n.run(c) }()
	pid, ended := waitStopped(t, n.binDir, done)
	if ended != nil {
		t.Fatalf("the %s ended before its fault point %s: %s (stderr %q)", c.verb, point, ended, ended.stderr)
	}
	return func() result {
		if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		return <-done
	}
}

// waitStopped returns the pid of the plugin process (run from binDir) once
// it has stopped itself, or the plugin's result if it ended first.
func waitStopped(t *testing.T, binDir string, done <-chan result) (int, *result) {
	t.Helper()
	deadline := time.Now().Add(callTimeout)
	for time.Now().Before(deadline) {
		select {
		case r := <-done:
			return 0, &r
		default:
		}
		procs, _ := filepath.Glob("/proc/[0-9]*/stat")
		for _, p := range procs {
			b, err := os.ReadFile(p)
			if err != nil {
				continue
			}
			// pid (comm) state ...
			s := string(b)
			i := strings.LastIndexByte(s, ')')
			if i < 0 || i+2 >= len(s) || s[i+2] != 'T' {
				continue
			}
			dir := filepath.Dir(p)
			if cmd, _ := os.ReadFile(filepath.Join(dir, "cmdline")); strings.HasPrefix(string(cmd), filepath.Join(binDir, "bridge")) {
				var pid int
				fmt.Sscanf(filepath.Base(dir), "%d", &pid)
				return pid, nil
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("the plugin never stopped at its fault point")
	return 0, nil
}

// TestDelFreesAddressesLast: a DEL frees its pod's addresses only once it has
// removed what the kernel keys by them. A DEL stopped right after its
// release, an ADD that takes the freed address, then the DEL goes on: the
// new pod keeps its masquerade entry and passes CHECK. When the DEL freed
// the address first, it then removed the new pod's entry (TestStorm caught
// it once: a CHECK found a masquerade entry missing).
func TestDelFreesAddressesLast(t *testing.T) {
	n := newNode(t, faultBin(t))
	conf := hostileConf(t, nil)
	old := n.add("bridge", conf, uniq("old"), newNS(t))
	ip := old.ips[0]

	resume := n.runStopped(t, call{role: "bridge", verb: "DEL", conf: withPrev(t, conf, old.prev), cid: old.cid, netns: old.netns, ifname: "eth0"},
		"bridge/del/after-ipam")
	// The ADD runs while the DEL is stopped: its address must be free.
	repl := n.add("bridge", conf, uniq("new"), newNS(t), "CNI_ARGS=IgnoreUnknown=1;IP="+ip.String())
	if r := resume(); r.code != 0 || r.killed {
		t.Fatalf("DEL: %s", r)
	}
	if len(repl.ips) == 0 || repl.ips[0] != ip {
		t.Fatalf("the new pod got %v, want the freed %s", repl.ips, ip)
	}
	s := n.state("hostile", "cbxhostile0")
	if !slices.Contains(s.masq, ip) {
		t.Errorf("masquerade entries %v: the new pod's %s is gone", s.masq, ip)
	}
	n.check("bridge", conf, repl)
	n.del("bridge", conf, repl, repl.netns)
	n.assertNothing()
}
