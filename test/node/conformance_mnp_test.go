//go:build kube

package node

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/vishvananda/netns"
	"sigs.k8s.io/yaml"

	"github.com/cnibox/cnibox/netops/nft"
)

// The anchor of MultiNetworkPolicy enforcement: the e2e traffic tests of
// k8snetworkplumbingwg/multi-networkpolicy-iptables (e2e/tests: a .bats
// file and its manifest per case, and common.bash), at this commit.
// testdata/multi-networkpolicy-e2e/README.md says where they come from and
// why they are not in the repository; SHA256SUMS there holds each file's
// digest at the commit, which the test checks before it runs them.
const (
	mnpAnchor       = "k8snetworkplumbingwg/multi-networkpolicy-iptables"
	mnpAnchorCommit = "cbf2b11730b9fb0477d8d578129609df0c51f06b"
	mnpTestdata     = "testdata/multi-networkpolicy-e2e"
	// mnpImage is the tests' pod image (fedora with nmap-ncat and
	// iproute); the harness writes its own under that name
	// (writeMNPImage).
	mnpImage = "ghcr.io/k8snetworkplumbingwg/multi-networkpolicy-iptables:e2e-test"
	// What docs/deploy.md has an operator apply to a cluster that runs
	// cnibox.yaml for MultiNetworkPolicy: the CRD, the agent's role, and
	// the DaemonSet's patch (--multi-network-policies as
	// FLANNELD_MULTI_NETWORK_POLICIES, CAP_SYS_ADMIN, the node's
	// /run/netns).
	mnpCRDFile   = "../../deploy/kubernetes/multi-networkpolicy-crd.yaml"
	mnpCRDName   = "multi-networkpolicies.k8s.cni.cncf.io"
	mnpRBACFile  = "../../deploy/kubernetes/multi-network-policies.yaml"
	mnpPatchFile = "../../deploy/kubernetes/multi-network-policies-patch.yaml"
	// mnpSecondary is the ConfigMap key that has the install step wrap
	// cni-conf.json in multi (pods get the networks of their
	// k8s.v1.cni.cncf.io/networks annotation).
	mnpSecondary = "secondary-networks"
	// mnpSyncWait bounds the wait for the agent's cnibox-mnp tables after
	// a file's setup: past it, the probes run and tell.
	mnpSyncWait = time.Minute
)

// mnpLeftOut are the anchor's tests that do not run, by name, each with
// its reason: they check multi-networkpolicy-iptables' own implementation,
// not traffic.
var mnpLeftOut = map[string]string{
	"check generated iptables rules":                        mnpRulesCheck,
	"check generated ip6tables rules":                       mnpRulesCheck,
	"disable multi-networkpolicy and check iptables rules":  mnpDisableCheck,
	"disable multi-networkpolicy and check ip6tables rules": mnpDisableCheck,
}

const (
	mnpRulesCheck   = "checks the anchor's own iptables chains (MULTI-0-INGRESS/EGRESS) in the pods: its implementation, not traffic"
	mnpDisableCheck = "patches the anchor's DaemonSet (multi-networkpolicy-ds-amd64) and checks that its chains go"
)

// mnpLeftOutFiles are the anchor's .bats files that do not run, with why.
var mnpLeftOutFiles = map[string]string{
	"bond-cni.bats": "its pods attach bond-cni over two macvlans: cnibox has no bond role",
}

// TestKubeMNPE2E runs the anchor's MultiNetworkPolicy e2e traffic tests
// (every .bats file of $CNIBOX_MNP_E2E, default mnpTestdata, checked
// against SHA256SUMS) with bats on a cluster of one kubelet node, as the
// anchor's kind cluster has one worker: the tests' NADs use host-local and
// static IPAM on a macvlan, so every pod must be on one node. cnibox runs
// as bin/cnibox.yaml deploys it with secondary networks and
// MultiNetworkPolicy turned on as docs/deploy.md says: nad-crd.yaml and
// multi-networkpolicy-crd.yaml, the ConfigMap's `secondary-networks:
// "true"`, multi-network-policies.yaml (the agent's role) and
// multi-network-policies-patch.yaml (kubectl patch), plus default's NADs
// trusted (trustDefault: the tests' NADs live there and put a macvlan on
// the node's interface). The tests' pod image is busybox with
// test/internal/ncat as nc.
//
// Each file runs in a temporary copy of the directory whose common.bash
// is the harness's (testdata/multi-networkpolicy-e2e/cnibox-common.bash:
// the pod's net1 address without `ip -j` and jq), in two bats runs: the
// file's setup test, then, once the agent has written the table of every
// pod a policy selects, the rest but mnpLeftOut (bats --filter). Their
// TAP output (FILE.tap), results.tsv (file: test, state) and summary
// (`mnp e2e: N passed, M failed, K skipped`, the left-out tests counted as
// skipped) go to $CNIBOX_CONFORMANCE_REPORT. A failed test fails this
// test.
func TestKubeMNPE2E(t *testing.T) {
	report := env(t, "CNIBOX_CONFORMANCE_REPORT", "where the report goes (bin/conformance/mnp)")
	imageTar := env(t, "CNIBOX_IMAGE_TAR", "make image's archive (bin/cnibox-image.tar)")
	tests := mnpTests(t)
	bats, err := exec.LookPath("bats")
	if err != nil {
		t.Fatalf("bats: %v (apt-get install bats)", err)
	}
	start := time.Now()
	kubeBinaries(t)
	data, err := os.ReadFile(env(t, "CNIBOX_MANIFEST", "make image's manifest (bin/cnibox.yaml)"))
	if err != nil {
		t.Fatal(err)
	}
	manifest := mnpManifest(t, string(data))
	images := []string{imageTar, writeMNPImage(t, t.TempDir())}

	// no reference plugins: every plugin on the node is cnibox's
	c := startClusterWith(t, 1, clusterOpts{env: []string{"CLUSTER_CONTROLLERS=*"}, plugins: t.TempDir()})
	nd := c.nodes[0]
	c.importImages(images...)
	step(t, "mnp: the CRDs, cnibox, multi-network-policies.yaml and its patch", func() {
		for _, f := range []string{nadCRDFile, mnpCRDFile} {
			crd, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			c.apply(string(crd))
		}
		c.crdEstablished("network-attachment-definitions.k8s.cni.cncf.io")
		c.crdEstablished(mnpCRDName)
		c.apply(manifest)
		c.must("-n", "kube-system", "rollout", "status", "ds/cnibox", c.timeout())
		// as docs/deploy.md has it: kubectl patch --patch-file
		c.must("-n", "kube-system", "patch", "daemonset", "cnibox", "--patch-file", mnpPatchFile)
		c.must("-n", "kube-system", "rollout", "status", "ds/cnibox", c.timeout())
		c.must("wait", "--for=condition=Ready", "node", "--all", c.timeout())
		c.secondaryNetworks(nd)
	})
	t.Logf("mnp: cluster ready after %v", time.Since(start).Round(time.Second))

	if err := os.RemoveAll(report); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(report, 0o755); err != nil {
		t.Fatal(err)
	}
	run := mnpCopy(t, tests)
	files, _ := filepath.Glob(filepath.Join(run, "*.bats"))
	var res []specResult
	for _, f := range files {
		name := filepath.Base(f)
		if why, ok := mnpLeftOutFiles[name]; ok {
			for _, test := range batsTests(t, f) {
				res = append(res, specResult{name: name + ": " + test, state: "skipped", failure: "left out: " + why})
			}
			continue
		}
		step(t, "mnp: "+name, func() { res = append(res, c.runBatsFile(bats, f, report, nd)...) })
	}
	mnpJudge(t, report, res)
	t.Logf("mnp: the run took %v", time.Since(start).Round(time.Second))
}

// mnpTests is the directory of the anchor's tests ($CNIBOX_MNP_E2E, default
// mnpTestdata), every file of SHA256SUMS in it as it is at mnpAnchorCommit.
func mnpTests(t *testing.T) string {
	t.Helper()
	dir := cmp.Or(os.Getenv("CNIBOX_MNP_E2E"), mnpTestdata)
	sums, err := os.ReadFile(filepath.Join(mnpTestdata, "SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, line := range strings.Split(strings.TrimSpace(string(sums)), "\n") {
		want, name, ok := strings.Cut(line, "  ")
		if !ok {
			t.Fatalf("%s/SHA256SUMS: %q", mnpTestdata, line)
		}
		got, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatalf("the anchor's tests: %v: put e2e/tests of %s at %s into %s or name that directory in $CNIBOX_MNP_E2E (%s/README.md)",
				err, mnpAnchor, mnpAnchorCommit[:12], mnpTestdata, mnpTestdata)
		}
		if sum := sha256.Sum256(got); hex.EncodeToString(sum[:]) != want {
			t.Fatalf("%s is not the anchor's at %s (sha256 %x, want %s)", filepath.Join(dir, name), mnpAnchorCommit[:12], sum, want)
		}
		n++
	}
	t.Logf("the anchor's tests: %d files in %s, each as at %s %s", n, dir, mnpAnchor, mnpAnchorCommit[:12])
	return dir
}

// mnpCopy copies the tests into a temporary directory, with the harness's
// common.bash over the anchor's.
func mnpCopy(t *testing.T, tests string) string {
	t.Helper()
	dir := t.TempDir()
	ents, err := os.ReadDir(tests)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if ext := path.Ext(e.Name()); e.Type().IsRegular() && (ext == ".bats" || ext == ".yml" || ext == ".bash") {
			copyFile(t, filepath.Join(tests, e.Name()), filepath.Join(dir, e.Name()), 0o644)
		}
	}
	copyFile(t, filepath.Join(mnpTestdata, "cnibox-common.bash"), filepath.Join(dir, "common.bash"), 0o644)
	return dir
}

// mnpManifest is the manifest with the ConfigMap's mnpSecondary, the
// agent's role of mnpRBACFile, and default's NADs trusted (trustDefault).
func mnpManifest(t *testing.T, manifest string) string {
	t.Helper()
	manifest = trustDefault(manifest)
	const data = "\ndata:\n"
	if n := strings.Count(manifest, data); n != 1 {
		t.Fatalf("the manifest has %d lines %q, want the ConfigMap's one", n, strings.TrimSpace(data))
	}
	manifest = strings.Replace(manifest, data, data+"  "+mnpSecondary+": \"true\"\n", 1)
	rbac, err := os.ReadFile(mnpRBACFile)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimRight(manifest, "\n") + "\n---\n" + string(rbac)
}

// secondaryNetworks checks that the install step put cni-conf.json into
// multi on node n, as mnpSecondary asks.
func (c *cluster) secondaryNetworks(n *node) {
	t := c.t
	t.Helper()
	conf, err := os.ReadFile(filepath.Join(n.hostDir("/etc/cni/net.d"), "10-cnibox.conflist"))
	if err != nil {
		t.Fatal(err)
	}
	var list struct {
		Plugins []struct {
			Type      string            `json:"type"`
			Delegates []json.RawMessage `json:"delegates"`
		} `json:"plugins"`
	}
	if err := json.Unmarshal(conf, &list); err != nil {
		t.Fatalf("10-cnibox.conflist: %v\n%s", err, conf)
	}
	if len(list.Plugins) != 1 || list.Plugins[0].Type != "multi" || len(list.Plugins[0].Delegates) != 1 {
		t.Fatalf("with %s: \"true\" the node's conflist is not cni-conf.json in multi:\n%s", mnpSecondary, conf)
	}
}

// writeMNPImage writes the tests' pod image under mnpImage: busybox,
// test/internal/ncat as /bin/nc, and dash as /bin/sh (busybox's sh would
// run its own nc applet, not PATH's) with its libraries. It returns the
// archive's path.
func writeMNPImage(t *testing.T, dir string) string {
	t.Helper()
	nc := filepath.Join(dir, "nc")
	build := exec.Command("go", "build", "-trimpath", "-o", nc, "../internal/ncat")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ncat: %v\n%s", err, out)
	}
	files := map[string]string{"/bin/sh": "/usr/bin/dash"}
	withLibraries(t, files)
	img := []imageFile{fileFrom(t, "/bin/nc", nc)}
	for image, host := range files {
		img = append(img, fileFrom(t, image, host))
	}
	archive := filepath.Join(dir, "mnp-image.tar")
	writeImageSpec(t, archive, imageSpec{refs: []string{mnpImage}, cmd: []string{"sleep", "2147483647"}, files: img})
	return archive
}

// batsTests lists the tests of a .bats file by name, in order.
func batsTests(t *testing.T, file string) []string {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, m := range regexp.MustCompile(`(?m)^\s*@test\s+"((?:[^"\\]|\\.)*)"\s*\{`).FindAllStringSubmatch(string(data), -1) {
		names = append(names, m[1])
	}
	if len(names) == 0 {
		t.Fatalf("%s: no @test", file)
	}
	return names
}

// batsFilter is bats' --filter for exactly the tests named (a POSIX ERE
// the test names are matched against).
func batsFilter(names []string) string {
	quoted := make([]string, len(names))
	for i, n := range names {
		quoted[i] = regexp.MustCompile(`[\\.\[\]()*+?{}|^$]`).ReplaceAllString(n, `\$0`)
	}
	return "^(" + strings.Join(quoted, "|") + ")$"
}

// runBatsFile runs the .bats file (in its directory, the run's copy) in
// two bats runs, as TestKubeMNPE2E's comment says, its TAP output into
// report/FILE.tap, and returns each test's result in the file's order
// (its name prefixed with the file's). Between them it waits for the
// policies' tables on node n (waitMNPTables). Then it deletes what the
// file's manifest created, should its cleanup test have failed.
func (c *cluster) runBatsFile(bats, file, report string, n *node) []specResult {
	t := c.t
	t.Helper()
	name := filepath.Base(file)
	all := batsTests(t, file)
	got := map[string]specResult{}
	var run []string
	for _, test := range all {
		if why, ok := mnpLeftOut[test]; ok {
			got[test] = specResult{state: "skipped", failure: "left out: " + why}
			continue
		}
		run = append(run, test)
	}
	tap, err := os.Create(filepath.Join(report, name+".tap"))
	if err != nil {
		t.Fatal(err)
	}
	defer tap.Close()
	phases := [][]string{run}
	if strings.HasPrefix(run[0], "setup") && len(run) > 1 {
		phases = [][]string{run[:1], run[1:]}
	}
	manifest := strings.TrimSuffix(file, ".bats") + ".yml"
	for i, tests := range phases {
		if i == 1 {
			c.waitMNPTables(n, manifest)
		}
		filter := batsFilter(tests)
		out := c.bats(bats, file, filter)
		fmt.Fprintf(tap, "# bats --tap --filter '%s' %s\n%s", filter, name, out)
		tapped := readTAP(out)
		for _, test := range tests {
			r, ok := tapped[test]
			if !ok {
				r = specResult{state: "failed", failure: "bats reported no result:\n" + out}
			}
			got[test] = r
		}
	}
	res := make([]specResult, len(all))
	for i, test := range all {
		res[i] = got[test]
		res[i].name = name + ": " + test
	}
	if _, err := os.Stat(manifest); err == nil {
		if out, err := c.kubectlIn("", "delete", "--ignore-not-found", "--wait", c.timeout(), "-f", manifest); err != nil {
			t.Errorf("%s: kubectl delete -f %s after it: %v\n%s", name, filepath.Base(manifest), err, out)
		}
	}
	return res
}

// bats runs bats on file with filter in the control plane's network
// namespace (kubectl there reaches the API server; KUBECONFIG is the
// cluster's) and returns its TAP output; a bats that does not end by the
// test's deadline is killed with its children.
func (c *cluster) bats(bats, file, filter string) string {
	t := c.t
	t.Helper()
	ctx, cancel := context.WithDeadline(context.Background(), c.deadline)
	defer cancel()
	home := t.TempDir()
	cmd := exec.CommandContext(ctx, "nsenter", "-t", strconv.Itoa(c.init), "-n", bats, "--tap", "--filter", filter, filepath.Base(file))
	cmd.Dir = filepath.Dir(file)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+c.kubeconfig, "HOME="+home,
		"PATH="+c.kubeBin+":"+os.Getenv("PATH"),
		// a test that hangs fails alone (the tests' waits are 300 s)
		"BATS_TEST_TIMEOUT=400")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Logf("bats %s (--filter %s): %v", filepath.Base(file), filter, err)
	}
	return out.String()
}

// tapLine is a TAP result line as bats writes it.
var tapLine = regexp.MustCompile(`^(ok|not ok) \d+ (.*?)(?: # (skip|timeout after \d+s)\b.*)?$`)

// readTAP reads bats' TAP output: each test's state by name, a failure
// with its diagnostics (the `# ` lines after it).
func readTAP(out string) map[string]specResult {
	res := map[string]specResult{}
	var last string
	for _, line := range strings.Split(out, "\n") {
		if m := tapLine.FindStringSubmatch(line); m != nil {
			r := specResult{state: "passed"}
			switch {
			case m[1] == "not ok":
				r.state = "failed"
				if m[3] != "" {
					r.failure = m[3] + "\n"
				}
			case m[3] == "skip":
				r.state = "skipped"
			}
			last = m[2]
			res[last] = r
			continue
		}
		if d, ok := strings.CutPrefix(line, "# "); ok && last != "" && res[last].state == "failed" {
			r := res[last]
			r.failure += d + "\n"
			res[last] = r
		}
	}
	return res
}

// mnpSubjects are the pods (namespace/name) that the manifest's
// MultiNetworkPolicies select (podSelector's matchLabels over the
// manifest's pods of the policy's namespace); ok is false if a policy
// selects by an expression, which the test does not evaluate.
func mnpSubjects(t *testing.T, manifest string) (subjects []string, ok bool) {
	t.Helper()
	data, err := os.ReadFile(manifest)
	if err != nil {
		t.Fatal(err)
	}
	type obj struct {
		Kind     string `json:"kind"`
		Metadata struct {
			Name      string            `json:"name"`
			Namespace string            `json:"namespace"`
			Labels    map[string]string `json:"labels"`
		} `json:"metadata"`
		Spec struct {
			PodSelector *struct {
				MatchLabels      map[string]string `json:"matchLabels"`
				MatchExpressions []any             `json:"matchExpressions"`
			} `json:"podSelector"`
		} `json:"spec"`
	}
	var pods, policies []obj
	for _, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(data), -1) {
		var o obj
		if err := yaml.Unmarshal([]byte(doc), &o); err != nil {
			t.Fatalf("%s: %v", manifest, err)
		}
		switch o.Kind {
		case "Pod":
			pods = append(pods, o)
		case "MultiNetworkPolicy":
			policies = append(policies, o)
		}
	}
	set := map[string]bool{}
	for _, p := range policies {
		sel := p.Spec.PodSelector
		if sel != nil && len(sel.MatchExpressions) > 0 {
			return nil, false
		}
		for _, pod := range pods {
			if pod.Metadata.Namespace != p.Metadata.Namespace {
				continue
			}
			if sel == nil || labelsMatch(sel.MatchLabels, pod.Metadata.Labels) {
				set[pod.Metadata.Namespace+"/"+pod.Metadata.Name] = true
			}
		}
	}
	return slices.Sorted(maps.Keys(set)), true
}

// labelsMatch reports whether labels has every pair of sel.
func labelsMatch(sel, labels map[string]string) bool {
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// waitMNPTables waits until every pod the manifest's MultiNetworkPolicies
// select has the agent's table (netops/nft's MultiTable, cnibox-mnp) in
// its network namespace: the policies are in force. Past mnpSyncWait it
// logs what is missing and returns: the probes then tell.
func (c *cluster) waitMNPTables(n *node, manifest string) {
	t := c.t
	t.Helper()
	subjects, ok := mnpSubjects(t, manifest)
	if !ok || len(subjects) == 0 {
		t.Logf("%s: no subject the test can tell (a matchExpressions selector, or none): not waited for", filepath.Base(manifest))
		return
	}
	start := time.Now()
	deadline := start.Add(mnpSyncWait)
	var missing []string
	for {
		missing = c.withoutMNPTable(n, subjects)
		if len(missing) == 0 {
			t.Logf("%s: the cnibox-mnp table in %v after %v", filepath.Base(manifest), subjects, time.Since(start).Round(10*time.Millisecond))
			return
		}
		if time.Now().After(deadline) {
			t.Logf("%s: after %v, no cnibox-mnp table in %v: the probes go ahead", filepath.Base(manifest), mnpSyncWait, missing)
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// withoutMNPTable lists the pods (namespace/name) whose network namespace
// on node n has no cnibox-mnp table, with the error if it could not be
// read, or that have no endpoint in the node's store yet (the store's
// endpoints name each pod's namespace).
func (c *cluster) withoutMNPTable(n *node, pods []string) []string {
	cnibox := filepath.Join(n.hostDir("/opt/cni/bin"), "cnibox")
	out, err := n.onNode(cnibox, "inspect", "endpoints", "--json")
	var eps []struct {
		Netns        string `json:"netns"`
		PodNamespace string `json:"podNamespace"`
		PodName      string `json:"podName"`
	}
	if err == nil {
		err = json.Unmarshal([]byte(out), &eps)
	}
	if err != nil {
		c.t.Logf("cnibox inspect endpoints: %v", err)
		return pods
	}
	netns := map[string]string{}
	for _, e := range eps {
		if e.Netns != "" {
			netns[e.PodNamespace+"/"+e.PodName] = e.Netns
		}
	}
	var missing []string
	for _, p := range pods {
		ns, ok := netns[p]
		if !ok {
			missing = append(missing, p)
			continue
		}
		// through the node's root; /var/run is a link to /run there, and an
		// absolute link under /proc/PID/root resolves against ours
		if rest, ok := strings.CutPrefix(ns, "/var/run/"); ok {
			ns = "/run/" + rest
		}
		if ok, err := hasMNPTable(fmt.Sprintf("/proc/%d/root%s", n.init, ns)); err != nil {
			missing = append(missing, fmt.Sprintf("%s (%v)", p, err))
		} else if !ok {
			missing = append(missing, p)
		}
	}
	return missing
}

// hasMNPTable reports whether the network namespace nsPath has the table
// inet cnibox-mnp. It asks over netlink: Debian's nft (1.0.6) aborts on
// the table's concatenated set keys, even for `nft list tables`.
func hasMNPTable(nsPath string) (bool, error) {
	ns, err := netns.GetFromPath(nsPath)
	if err != nil {
		return false, err
	}
	defer ns.Close()
	conn, err := nftables.New(nftables.WithNetNSFd(int(ns)))
	if err != nil {
		return false, err
	}
	defer conn.CloseLasting()
	tables, err := conn.ListTablesOfFamily(nftables.TableFamilyINet)
	if err != nil {
		return false, err
	}
	return slices.ContainsFunc(tables, func(t *nftables.Table) bool { return t.Name == nft.MultiTable }), nil
}

// mnpJudge writes results.tsv (file: test, state, and a left-out test's
// reason) and the summary line (`mnp e2e: N passed, M failed, K skipped`)
// into report and fails the test for each failed test.
func mnpJudge(t *testing.T, report string, res []specResult) {
	t.Helper()
	var tsv strings.Builder
	count := map[string]int{}
	for _, r := range res {
		note := ""
		if strings.HasPrefix(r.failure, "left out: ") {
			note = r.failure
		}
		fmt.Fprintf(&tsv, "%s\t%s\t%s\n", r.name, r.state, note)
		count[r.state]++
		if r.state == "failed" {
			t.Errorf("failed: %s\n%s", r.name, r.failure)
		}
	}
	summary := fmt.Sprintf("mnp e2e: %d passed, %d failed, %d skipped", count["passed"], count["failed"], count["skipped"])
	if err := os.WriteFile(filepath.Join(report, "results.tsv"), []byte(tsv.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(report, "summary"), []byte(summary+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Log(summary)
}
