package reliability

import (
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

	"github.com/containernetworking/cni/libcni"
	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/cnibox/cnibox/store"
)

// cnibox runs the CLI and returns its output and exit code.
func (n *node) cnibox(args ...string) (string, int) {
	n.t.Helper()
	cmd := exec.Command(n.bin, args...)
	cmd.Env = append(os.Environ(), "CNIBOX_DATA_DIR="+n.dataDir)
	out, err := cmd.CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		n.t.Fatal(err)
	}
	return string(out), code
}

// TestStoreRecovery breaks the store file (empty, truncated, garbage) under
// running pods: calls fail with a message naming the file and the recovery
// command, `cnibox store check` says what is wrong, and `cnibox store
// rebuild` recovers every pod's reservation and record from the kernel,
// the namespaces and libcni's cache, so that new pods get no address that
// a running pod has and DEL of the old pods releases theirs.
func TestStoreRecovery(t *testing.T) {
	for _, damage := range []string{"zero bytes", "truncated", "garbage"} {
		t.Run(damage, func(t *testing.T) { storeRecovery(t, damage) })
	}
}

func storeRecovery(t *testing.T, damage string) {
	n := newNode(t, plainBin(t))
	confDir, cacheDir := t.TempDir(), t.TempDir()
	nw := tnet{name: "rebuild", bridge: "cbxrebuild0"}
	listJSON := `{"cniVersion":"1.1.0","name":"rebuild","plugins":[{"type":"bridge","bridge":"cbxrebuild0","isGateway":true,"ipMasq":true,
		"ipam":{"type":"host-local","ranges":[[{"subnet":"10.96.0.0/24"}]]}}]}`
	if err := os.WriteFile(filepath.Join(confDir, "10-rebuild.conflist"), []byte(listJSON), 0o644); err != nil {
		t.Fatal(err)
	}
	list, err := libcni.ConfListFromBytes([]byte(listJSON))
	if err != nil {
		t.Fatal(err)
	}
	// The plugin config as libcni hands it to the plugin.
	conf := []byte(`{"cniVersion":"1.1.0","name":"rebuild","type":"bridge","bridge":"cbxrebuild0","isGateway":true,"ipMasq":true,
		"ipam":{"type":"host-local","ranges":[[{"subnet":"10.96.0.0/24"}]]}}`)
	t.Setenv("CNIBOX_DATA_DIR", n.dataDir)
	t.Setenv("CNIBOX_LOG_FILE", "off")
	cni := libcni.NewCNIConfigWithCacheDir([]string{n.binDir}, cacheDir, nil)
	ctx := context.Background()

	// Three pods through libcni (cached), one by hand (no cache entry).
	var pods []*attachment
	var rts []*libcni.RuntimeConf
	for i := 0; i < 3; i++ {
		a := &attachment{cid: uniq("cached"), ifname: "eth0", netns: newNS(t)}
		rt := &libcni.RuntimeConf{ContainerID: a.cid, NetNS: a.netns, IfName: "eth0",
			Args: [][2]string{{"IgnoreUnknown", "1"}, {"K8S_POD_NAMESPACE", "ns"}, {"K8S_POD_NAME", fmt.Sprintf("p%d", i)}}}
		r, err := cni.AddNetworkList(ctx, list, rt)
		if err != nil {
			t.Fatal(err)
		}
		res, _ := current.NewResultFromResult(r)
		for _, ipc := range res.IPs {
			ip, _ := netip.AddrFromSlice(ipc.Address.IP)
			a.ips = append(a.ips, ip.Unmap())
		}
		pods, rts = append(pods, a), append(rts, rt)
	}
	raw := n.add("bridge", conf, uniq("uncached"), newNS(t))
	n.assertOnly(nw, append(slices.Clone(pods), raw))

	// Damage the file.
	path := filepath.Join(n.dataDir, store.FileName)
	whole, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var bad []byte
	switch damage {
	case "truncated":
		bad = whole[:os.Getpagesize()+123]
	case "garbage":
		bad = []byte(strings.Repeat("garbage!", len(whole)/8))
	}
	if err := os.WriteFile(path, bad, 0o600); err != nil {
		t.Fatal(err)
	}

	// Calls fail with code 5, naming the file and the way out.
	r := n.run(call{role: "bridge", verb: "ADD", conf: conf, cid: uniq("refused"), netns: newNS(t), ifname: "eth0"})
	if r.code != 5 || !strings.Contains(r.msg, path) || !strings.Contains(r.msg, "cnibox store rebuild") {
		t.Errorf("ADD on a %s store: %s; want code 5 naming %s and `cnibox store rebuild`", damage, r, path)
	}
	out, code := n.cnibox("store", "check", "--data-dir", n.dataDir)
	if code != 1 || !strings.Contains(out, "cnibox store rebuild --data-dir "+n.dataDir) {
		t.Errorf("store check on a %s store: exit %d, want 1 and the rebuild command:\n%s", damage, code, out)
	}

	out, code = n.cnibox("store", "rebuild", "--data-dir", n.dataDir, "--conf-dir", confDir, "--cache-dir", cacheDir)
	t.Logf("cnibox store rebuild:\n%s", out)
	if code != 0 {
		t.Fatalf("store rebuild: exit %d", code)
	}
	if backups, _ := filepath.Glob(path + ".broken-*"); len(backups) != 1 {
		t.Errorf("broken file kept as %v, want one backup", backups)
	}
	if out, code := n.cnibox("store", "check", "--data-dir", n.dataDir); code != 0 {
		t.Errorf("store check after rebuild: exit %d\n%s", code, out)
	}

	// Every running pod holds its addresses again: the cached ones under
	// their container IDs, the other under rebuilt-<veth>.
	placeholder := &attachment{cid: "rebuilt-" + hostVeth(raw.cid, "eth0"), ifname: "eth0", ips: raw.ips}
	held := map[string]bool{}
	for _, res := range n.state(nw.name, nw.bridge).reservations {
		held[res.ContainerID+" "+res.Addr.String()] = true
	}
	for _, a := range append(slices.Clone(pods), placeholder) {
		for _, ip := range a.ips {
			if !held[a.cid+" "+ip.String()] {
				t.Errorf("after rebuild %s does not hold %s (held: %v)", a.cid, ip, held)
			}
		}
	}

	// A new pod gets an address no running pod has.
	fresh := n.add("bridge", conf, uniq("fresh"), newNS(t))
	for _, a := range append(slices.Clone(pods), raw) {
		for _, ip := range a.ips {
			if slices.Contains(fresh.ips, ip) {
				t.Fatalf("new pod got %s, which %s still uses", ip, a.cid)
			}
		}
	}
	// DEL of the cached pods releases their addresses (libcni, twice).
	for _, rt := range rts {
		for i := 0; i < 2; i++ {
			if err := cni.DelNetworkList(ctx, list, rt); err != nil {
				t.Fatal(err)
			}
		}
	}
	// The uncached pod's DEL removes its veth; its address, recorded under
	// the placeholder, goes with the runtime's GC.
	n.del("bridge", conf, raw, raw.netns)
	n.gc("bridge", conf, fresh)
	n.assertOnly(nw, []*attachment{fresh}, append(pods, raw)...)
	n.del("bridge", conf, fresh, fresh.netns)
	n.assertOnly(nw, nil, fresh)
}

// TestFileModes: the store directory and file, and the log directory and
// file, are readable by their owner only.
func TestFileModes(t *testing.T) {
	n := newNode(t, plainBin(t))
	base := t.TempDir()
	dataDir, logDir := filepath.Join(base, "data"), filepath.Join(base, "log")
	conf := []byte(`{"cniVersion":"1.1.0","name":"modes","type":"bridge","bridge":"cbxmodes0","ipam":{"type":"host-local","subnet":"10.97.0.0/24"}}`)
	a := &attachment{cid: uniq("modes"), ifname: "eth0", netns: newNS(t)}
	r := n.run(call{role: "bridge", verb: "ADD", conf: conf, cid: a.cid, netns: a.netns, ifname: "eth0",
		env: []string{"CNIBOX_DATA_DIR=" + dataDir, "CNIBOX_LOG_FILE=" + filepath.Join(logDir, "cnibox.log")}})
	if r.code != 0 {
		t.Fatalf("ADD: %s", r)
	}
	for path, want := range map[string]os.FileMode{
		dataDir: 0o700, filepath.Join(dataDir, store.FileName): 0o600,
		logDir: 0o700, filepath.Join(logDir, "cnibox.log"): 0o600,
	} {
		st, err := os.Stat(path)
		if err != nil {
			t.Errorf("%v", err)
			continue
		}
		if got := st.Mode().Perm(); got != want {
			t.Errorf("%s: mode %o, want %o", path, got, want)
		}
	}
	n.dataDir = dataDir
	a.prev, a.ips = r.out, resultIPs(t, r.out)
	n.del("bridge", conf, a, a.netns)
}

// TestTornStoreAfterReboot: a node comes back from a crash that tore the
// store (the pages of the last commits never reached the disk). The first
// ADD of the new boot works, the torn file is kept aside for a post-mortem,
// and `cnibox doctor` says what happened.
func TestTornStoreAfterReboot(t *testing.T) {
	n := newNode(t, plainBin(t))
	conf := []byte(`{"cniVersion":"1.1.0","name":"torn","type":"bridge","bridge":"cbxtorn0","isGateway":true,
		"ipam":{"type":"host-local","ranges":[[{"subnet":"10.95.0.0/24"}]]}}`)
	before := n.add("bridge", conf, uniq("before"), newNS(t))
	n.del("bridge", conf, before, before.netns)

	// The crash: the store's data pages are lost, and the boot it was
	// checked in is over.
	path := filepath.Join(n.dataDir, store.FileName)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for i := 2 * os.Getpagesize(); i < len(b); i++ {
		b[i] = 0xff
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path+".verified", []byte("boot-before-the-crash\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	after := n.add("bridge", conf, uniq("after"), newNS(t))
	defer n.del("bridge", conf, after, after.netns)
	torn, err := store.TornFiles(n.dataDir)
	if err != nil || len(torn) != 1 {
		t.Fatalf("torn files kept: %v %v, want one", torn, err)
	}
	if fi, err := os.Stat(torn[0]); err != nil || fi.Size() != int64(len(b)) {
		t.Errorf("kept file %s is not the torn store (%d bytes): %v", torn[0], len(b), err)
	}
	if out, code := n.cnibox("store", "check", "--data-dir", n.dataDir); code != 0 {
		t.Errorf("store check of the new store: exit %d\n%s", code, out)
	}

	confDir := t.TempDir()
	list := `{"cniVersion":"1.1.0","name":"torn","plugins":[` + string(conf) + `]}`
	if err := os.WriteFile(filepath.Join(confDir, "10-torn.conflist"), []byte(list), 0o644); err != nil {
		t.Fatal(err)
	}
	out, _ := n.cnibox("doctor", "--conf-dir", confDir, "--bin-dir", n.binDir, "--cache-dir", t.TempDir(), "--data-dir", n.dataDir, "--json")
	var rs []struct{ Check, Status, Detail, Fix string }
	if err := json.Unmarshal([]byte(out), &rs); err != nil {
		t.Fatalf("doctor --json: %v\n%s", err, out)
	}
	found := false
	for _, r := range rs {
		found = found || (r.Check == "store" && r.Status == "warn" && strings.Contains(r.Detail, torn[0]))
	}
	if !found {
		t.Errorf("doctor does not warn about the torn store %s:\n%s", torn[0], out)
	}
}
