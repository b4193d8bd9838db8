package reliability

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nstest"
	"github.com/cnibox/cnibox/store"
)

// callTimeout guards against a hang: a CNI call that takes this long has
// hung, which is a failure of its own (never a timing assertion).
const callTimeout = 2 * time.Minute

var (
	buildMu  sync.Mutex
	builds   = map[string]string{}
	buildDir string
)

// build builds cnibox with the given tags into a temp dir, once per test
// binary run.
func build(t testing.TB, tags string) string {
	t.Helper()
	buildMu.Lock()
	defer buildMu.Unlock()
	if p, ok := builds[tags]; ok {
		return p
	}
	if buildDir == "" {
		d, err := os.MkdirTemp("", "cnibox-reliability-")
		if err != nil {
			t.Fatal(err)
		}
		buildDir = d
	}
	out := filepath.Join(buildDir, "cnibox"+strings.ReplaceAll("-"+tags, ",", "-"))
	args := []string{"build", "-o", out}
	if tags != "" {
		args = append(args, "-tags", tags)
	}
	cmd := exec.Command("go", append(args, "github.com/cnibox/cnibox")...)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build -tags %q: %v\n%s", tags, err, b)
	}
	builds[tags] = out
	return out
}

// faultBin is cnibox built with the faultpoints tag: $CNIBOX_FAULT_BIN, or a
// fresh build.
func faultBin(t testing.TB) string {
	if p := os.Getenv("CNIBOX_FAULT_BIN"); p != "" {
		return p
	}
	return build(t, "faultpoints")
}

// plainBin is the binary under test: $CNIBOX_BIN (make test sets it) or a
// fresh build.
func plainBin(t testing.TB) string {
	if p := os.Getenv("CNIBOX_BIN"); p != "" {
		return p
	}
	return build(t, "")
}

// node is one test's node: a plugin dir of cnibox symlinks and a store dir.
type node struct {
	t       testing.TB
	bin     string
	binDir  string
	dataDir string
}

func newNode(t testing.TB, bin string) *node {
	t.Helper()
	nstest.RequireRoot(t)
	n := &node{t: t, bin: bin, binDir: t.TempDir(), dataDir: t.TempDir()}
	if out, err := exec.Command(bin, "install", "--dir", n.binDir).CombinedOutput(); err != nil {
		t.Fatalf("cnibox install: %v\n%s", err, out)
	}
	return n
}

// call is one CNI invocation.
type call struct {
	role, verb         string
	conf               []byte
	cid, netns, ifname string
	args               string   // CNI_ARGS
	env                []string // more environment, KEY=VALUE
}

// result is what a call did.
type result struct {
	code   uint // CNI error code; 0 = success
	killed bool // the process died of a signal (a fault point)
	out    []byte
	stderr string
	msg    string
}

func (r result) String() string {
	switch {
	case r.killed:
		return "killed"
	case r.code == 0:
		return "ok"
	}
	return fmt.Sprintf("error %d: %s", r.code, r.msg)
}

// run execs the role's symlink with the CNI environment of c, like a
// runtime does.
func (n *node) run(c call) result {
	n.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(n.binDir, c.role))
	cmd.Env = []string{
		"PATH=" + os.Getenv("PATH"),
		"CNI_COMMAND=" + c.verb,
		"CNI_PATH=" + n.binDir,
		"CNIBOX_DATA_DIR=" + n.dataDir,
		"CNIBOX_LOG_FILE=off",
	}
	for k, v := range map[string]string{"CNI_CONTAINERID": c.cid, "CNI_NETNS": c.netns, "CNI_IFNAME": c.ifname, "CNI_ARGS": c.args} {
		if v != "" {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
	}
	cmd.Env = append(cmd.Env, c.env...)
	cmd.Stdin = bytes.NewReader(c.conf)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if ctx.Err() != nil {
		n.t.Fatalf("%s %s %s hung for %s", c.role, c.verb, c.cid, callTimeout)
	}
	r := result{out: stdout.Bytes(), stderr: stderr.String()}
	var ee *exec.ExitError
	switch {
	case err == nil:
		return r
	case errors.As(err, &ee):
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			r.killed = true
			return r
		}
	default:
		n.t.Fatalf("exec %s: %v", c.role, err)
	}
	var te types.Error
	if jerr := json.Unmarshal(r.out, &te); jerr != nil || te.Code == 0 {
		n.t.Fatalf("%s %s %s: exit %v without a CNI error on stdout: %q (stderr %q)", c.role, c.verb, c.cid, err, r.out, r.stderr)
	}
	r.code, r.msg = te.Code, te.Msg
	return r
}

// attachment is one container's interface on a network.
type attachment struct {
	cid, ifname, netns string
	prev               []byte // the ADD result
	ips                []netip.Addr
}

// hostVeth is the bridge role's host veth name of an attachment.
func hostVeth(cid, ifname string) string {
	sum := sha256.Sum256([]byte(cid + "\x00" + ifname))
	return "cbx" + hex.EncodeToString(sum[:6])
}

// withPrev returns conf with prevResult set (what a runtime sends on CHECK
// and DEL).
func withPrev(t testing.TB, conf, prev []byte) []byte {
	t.Helper()
	if prev == nil {
		return conf
	}
	var m map[string]any
	if err := json.Unmarshal(conf, &m); err != nil {
		t.Fatal(err)
	}
	m["prevResult"] = json.RawMessage(prev)
	b, _ := json.Marshal(m)
	return b
}

// withKeep returns conf with the GC list of attachments to keep.
func withKeep(t testing.TB, conf []byte, keep []*attachment) []byte {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(conf, &m); err != nil {
		t.Fatal(err)
	}
	list := []map[string]string{}
	for _, a := range keep {
		list = append(list, map[string]string{"containerID": a.cid, "ifname": a.ifname})
	}
	m["cni.dev/valid-attachments"] = list
	b, _ := json.Marshal(m)
	return b
}

// resultIPs returns the addresses of an ADD result.
func resultIPs(t testing.TB, out []byte) []netip.Addr {
	t.Helper()
	var r current.Result
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("ADD result %q: %v", out, err)
	}
	var ips []netip.Addr
	for _, ipc := range r.IPs {
		a, _ := netip.AddrFromSlice(ipc.Address.IP)
		ips = append(ips, a.Unmap())
	}
	return ips
}

// state is what cnibox left on the node for one network.
type state struct {
	reservations []store.Reservation
	endpoints    []store.Endpoint
	veths        []string // host veths on the network's bridge
	allVeths     map[string]bool
	masq         []netip.Addr // pods of the network with a masquerade entry
	spoof        []string     // MAC spoof chains (s-<veth>) on the node
	problems     []string     // what `cnibox store check` finds
}

func (n *node) state(network, bridge string) state {
	n.t.Helper()
	s := state{allVeths: map[string]bool{}}
	st, err := store.OpenWith(n.dataDir, store.Options{NoCreate: true})
	if err == nil {
		err = st.ViewIPAM(network, func(tx *store.IPAMTx) error {
			s.reservations = tx.All()
			return nil
		})
		if err == nil {
			s.endpoints, err = st.Endpoints(network)
		}
		if err == nil {
			var rep store.CheckReport
			rep, err = st.Check()
			s.problems = rep.Problems
		}
		st.Close()
	}
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		n.t.Fatalf("read the store: %v", err)
	}
	h, err := netops.Open("")
	if err != nil {
		n.t.Fatal(err)
	}
	defer h.Close()
	links, err := h.Links()
	if err != nil {
		n.t.Fatal(err)
	}
	br := -1
	for _, l := range links {
		if l.Name == bridge {
			br = l.Index
		}
	}
	for _, l := range links {
		if l.Kind == "veth" {
			s.allVeths[l.Name] = true
			if l.MasterIndex == br {
				s.veths = append(s.veths, l.Name)
			}
		}
	}
	es, err := h.NFT().MasqEntries()
	if err != nil {
		n.t.Fatal(err)
	}
	for _, e := range es {
		if e.Network == network {
			s.masq = append(s.masq, e.PodIP)
		}
	}
	s.spoof = spoofChains(n.t)
	return s
}

var spoofChainRE = regexp.MustCompile(`(?m)^\s*chain (s-\S+) \{`)

// spoofChains lists the MAC spoof chains of `table bridge cnibox` (read with
// the nft tool: netops has no lister, and a test may shell out).
func spoofChains(t testing.TB) []string {
	out, err := exec.Command("nft", "list", "table", "bridge", "cnibox").CombinedOutput()
	if err != nil {
		if bytes.Contains(out, []byte("No such file")) {
			return nil
		}
		t.Fatalf("nft list table bridge cnibox: %v\n%s", err, out)
	}
	var chains []string
	for _, m := range spoofChainRE.FindAllSubmatch(out, -1) {
		chains = append(chains, string(m[1]))
	}
	return chains
}

// tnet names one test network and its bridge.
type tnet struct{ name, bridge string }

// assertOnly fails the test unless what is left of network belongs to the
// kept attachments: their reservations, records, veths, masquerade entries,
// nothing else; nothing at all of the gone attachments (veth anywhere, MAC
// spoof chain); every address held once; the store sound.
func (n *node) assertOnly(nw tnet, keep []*attachment, gone ...*attachment) {
	n.t.Helper()
	s := n.state(nw.name, nw.bridge)
	kept := map[string]bool{}
	keptVeth := map[string]bool{}
	keptIP := map[netip.Addr]bool{}
	for _, a := range keep {
		kept[a.cid+"/"+a.ifname] = true
		keptVeth[hostVeth(a.cid, a.ifname)] = true
		for _, ip := range a.ips {
			keptIP[ip] = true
		}
	}
	for _, r := range s.reservations {
		if !kept[r.ContainerID+"/"+r.IfName] {
			n.t.Errorf("leaked reservation: %s of %s/%s", r.Addr, r.ContainerID, r.IfName)
		} else if !keptIP[r.Addr] {
			n.t.Errorf("%s/%s holds %s, not an address of its ADD result", r.ContainerID, r.IfName, r.Addr)
		}
	}
	for _, e := range s.endpoints {
		if !kept[e.ContainerID+"/"+e.IfName] {
			n.t.Errorf("leaked endpoint record: %s/%s", e.ContainerID, e.IfName)
		}
	}
	for _, v := range s.veths {
		if !keptVeth[v] {
			n.t.Errorf("orphan veth %s on %s", v, nw.bridge)
		}
	}
	for _, a := range keep {
		if v := hostVeth(a.cid, a.ifname); !s.allVeths[v] {
			n.t.Errorf("veth %s of kept %s is gone", v, a.cid)
		}
	}
	for _, ip := range s.masq {
		if !keptIP[ip] {
			n.t.Errorf("orphan masquerade entry for %s", ip)
		}
	}
	for _, a := range gone {
		v := hostVeth(a.cid, a.ifname)
		if s.allVeths[v] {
			n.t.Errorf("orphan veth %s of %s", v, a.cid)
		}
		if slices.Contains(s.spoof, "s-"+v) {
			n.t.Errorf("orphan MAC spoof chain s-%s of %s", v, a.cid)
		}
	}
	for _, p := range s.problems {
		n.t.Errorf("store check: %s", p)
	}
	want := 0
	for _, a := range keep {
		want += len(a.ips)
	}
	if len(s.reservations) != want {
		n.t.Errorf("%d reservations, want %d (those of %d kept attachments)", len(s.reservations), want, len(keep))
	}
	seen := map[netip.Addr]bool{}
	for _, a := range keep {
		for _, ip := range a.ips {
			if seen[ip] {
				n.t.Errorf("duplicate address %s", ip)
			}
			seen[ip] = true
		}
	}
}

// add runs ADD and returns the attachment; it fails the test on error.
func (n *node) add(role string, conf []byte, cid, netns string, env ...string) *attachment {
	n.t.Helper()
	r := n.run(call{role: role, verb: "ADD", conf: conf, cid: cid, netns: netns, ifname: "eth0", env: env})
	if r.code != 0 || r.killed {
		n.t.Fatalf("ADD %s: %s", cid, r)
	}
	return &attachment{cid: cid, ifname: "eth0", netns: netns, prev: r.out, ips: resultIPs(n.t, r.out)}
}

// del runs DEL twice (as containerd does) and fails the test unless both
// succeed.
func (n *node) del(role string, conf []byte, a *attachment, netns string) {
	n.t.Helper()
	for i := 0; i < 2; i++ {
		r := n.run(call{role: role, verb: "DEL", conf: withPrev(n.t, conf, a.prev), cid: a.cid, netns: netns, ifname: a.ifname})
		if r.code != 0 || r.killed {
			n.t.Fatalf("DEL #%d %s: %s", i+1, a.cid, r)
		}
	}
}

// gc runs GC keeping the given attachments.
func (n *node) gc(role string, conf []byte, keep ...*attachment) {
	n.t.Helper()
	r := n.run(call{role: role, verb: "GC", conf: withKeep(n.t, conf, keep)})
	if r.code != 0 || r.killed {
		n.t.Fatalf("GC: %s", r)
	}
}

// check runs CHECK of a with its prevResult and fails the test on error.
func (n *node) check(role string, conf []byte, a *attachment) {
	n.t.Helper()
	r := n.run(call{role: role, verb: "CHECK", conf: withPrev(n.t, conf, a.prev), cid: a.cid, netns: a.netns, ifname: a.ifname})
	if r.code != 0 || r.killed {
		n.t.Errorf("CHECK %s: %s", a.cid, r)
	}
}

func uniq(prefix string) string {
	return fmt.Sprintf("%s-%d-%d", prefix, os.Getpid(), seq())
}

var (
	seqMu sync.Mutex
	seqN  int
)

func seq() int {
	seqMu.Lock()
	defer seqMu.Unlock()
	seqN++
	return seqN
}
