//go:build kube

package node

import (
	"bufio"
	"cmp"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// cnpVersion is the sigs.k8s.io/network-policy-api whose conformance suite
// TestKubeCNPConformance runs (test/conformance/build.sh cnp builds it).
const cnpVersion = "v0.3.0"

// cnpFeatures are the suite's features cnibox supports: the standard one
// and the experimental named ports and node peers (domainNames, the
// experimental CRD's other field, has no test in the suite: cnibox's own
// are test/domainnames and agent/policynft's, docs/policy.md).
const cnpFeatures = "ClusterNetworkPolicy,ClusterNetworkPolicyNamedPorts,ClusterNetworkPolicyEgressNodePeers"

// cnpChart is the Helm chart's RBAC template: its
// cnibox-cluster-network-policies role (and binding) is what
// --cluster-network-policies needs beyond bin/cnibox.yaml's.
const cnpChart = "../../deploy/helm/cnibox/templates/rbac.yaml"

// TestKubeCNPConformance is the ClusterNetworkPolicy conformance profile of
// sigs.k8s.io/network-policy-api cnpVersion (its own suite,
// TestConformanceProfiles of its ./conformance package, with
// --conformance-profiles=ClusterNetworkPolicy, the standard features and
// the experimental ClusterNetworkPolicyNamedPorts)
// on the three-node harness of TestKubeConformance (kube-proxy, every
// default controller), with cnibox as bin/cnibox.yaml deploys it plus
// --cluster-network-policies, the chart's cnibox-cluster-network-policies
// role and the module's standard CRD. The suite binary and the CRD come
// from test/conformance/build.sh cnp ($CNIBOX_CONFORMANCE_TOOLS); the
// suite's agnhost:2.45 is the conformance run's agnhost image. Its output
// (suite.log), the suite's report (report.yaml), results.tsv and summary
// (`conformance cnp: N passed, M failed, K skipped`) go to
// $CNIBOX_CONFORMANCE_REPORT. A failed conformance test fails this test;
// $CNIBOX_CNP_RUN narrows the suite's -test.run (default
// TestConformanceProfiles).
//
// On a kernel without SCTP sockets (this machine's: no CONFIG_IP_SCTP) the
// suite's SCTP servers (agnhost porter with SERVE_SCTP_PORT_*) cannot
// listen and their pods never turn Ready, so nothing would run: the test
// then has those containers run agnhost pause instead (withoutSCTPServers)
// and counts a test that failed on SCTP pokes alone apart from a failure
// (cnpJudge).
func TestKubeCNPConformance(t *testing.T) {
	tools := env(t, "CNIBOX_CONFORMANCE_TOOLS", "test/conformance/build.sh's directory (build.sh cnp)")
	report := env(t, "CNIBOX_CONFORMANCE_REPORT", "where the suite's report goes (bin/conformance/cnp)")
	suite := filepath.Join(tools, "cnp-conformance-"+cnpVersion+".test")
	// The experimental channel's CRD: the standard one's fields and the
	// experimental peers (nodes, domainNames), so that the suite's
	// experimental features cnibox supports run (cnpFeatures).
	crd := filepath.Join(tools, "cnp-crd-experimental-"+cnpVersion+".yaml")
	for _, f := range []string{suite, crd} {
		if _, err := os.Stat(f); err != nil {
			t.Fatalf("%v: build it with test/conformance/build.sh cnp", err)
		}
	}
	crdData, err := os.ReadFile(crd)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	kubeBinaries(t)
	images := writeConformanceImages(t, t.TempDir(), tools)
	images = append(images, env(t, "CNIBOX_IMAGE_TAR", "make image's archive (bin/cnibox-image.tar)"))
	data, err := os.ReadFile(env(t, "CNIBOX_MANIFEST", "make image's manifest (bin/cnibox.yaml)"))
	if err != nil {
		t.Fatal(err)
	}
	manifest := withClusterNetworkPolicies(t, string(data))
	c := startClusterWith(t, 3, clusterOpts{env: conformanceEnv()})
	c.importImages(images...)
	step(t, "cnp: the CRD, then cnibox with --cluster-network-policies", func() {
		c.apply(string(crdData))
		c.crdEstablished("clusternetworkpolicies.policy.networking.k8s.io")
		c.apply(manifest)
		c.must("wait", "--for=condition=Ready", "node", "--all", c.timeout())
		c.must("-n", "kube-system", "rollout", "status", "ds/cnibox", c.timeout())
		c.routePods()
	})
	t.Logf("cnp: cluster ready after %v", time.Since(start).Round(time.Second))
	sctp := sctpSockets()
	if !sctp {
		t.Log("cnp: this kernel opens no SCTP sockets: the suite's SCTP servers run agnhost pause, SCTP pokes fail")
	}
	var res []specResult
	step(t, "cnp: the conformance suite", func() { res = c.runCNPSuite(suite, report, sctp) })
	c.cnpJudge(report, res, sctp)
	t.Logf("cnp: the conformance run took %v", time.Since(start).Round(time.Second))
}

// withClusterNetworkPolicies is cnibox's manifest with the agent's
// --cluster-network-policies and the Helm chart's RBAC of that feature (the
// role and binding between its `if .Values.networkPolicy.clusterNetworkPolicies`
// and `end`, in kube-system): what an operator adds by hand.
func withClusterNetworkPolicies(t *testing.T, manifest string) string {
	t.Helper()
	const flag = "        - --kube-subnet-mgr\n"
	if n := strings.Count(manifest, flag); n != 1 {
		t.Fatalf("the manifest has %d lines %q, want the agent's one", n, flag)
	}
	manifest = strings.Replace(manifest, flag, flag+"        - --cluster-network-policies\n", 1)
	chart, err := os.ReadFile(cnpChart)
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?s)\{\{- if \.Values\.networkPolicy\.clusterNetworkPolicies \}\}\n(.*?)\{\{- end \}\}`).FindSubmatch(chart)
	if m == nil || !strings.Contains(string(m[1]), "name: cnibox-cluster-network-policies") {
		t.Fatalf("%s: no cnibox-cluster-network-policies role under `if .Values.networkPolicy.clusterNetworkPolicies`", cnpChart)
	}
	rbac := strings.ReplaceAll(string(m[1]), "{{ .Release.Namespace }}", "kube-system")
	if strings.Contains(rbac, "{{") {
		t.Fatalf("%s: the role's template has more than the release's namespace:\n%s", cnpChart, rbac)
	}
	return strings.TrimRight(manifest, "\n") + "\n" + rbac
}

// cnpResult is a `--- PASS|FAIL|SKIP: TestConformanceProfiles/NAME` line
// of go test -v: a conformance test's result (its subtests have a second
// slash and are not counted).
var cnpResult = regexp.MustCompile(`^\s*--- (PASS|FAIL|SKIP): TestConformanceProfiles/([^/\s]+) \(`)

// runCNPSuite runs the suite binary in the control plane's namespace (a
// client outside the cluster) against the cluster's kubeconfig, its output
// in report/suite.log, and returns each conformance test's result (a
// failure carries the test's lines of the log). Without sctp it has the
// suite's SCTP servers replaced while the suite waits for its pods.
func (c *cluster) runCNPSuite(suite, report string, sctp bool) []specResult {
	t := c.t
	t.Helper()
	if err := os.RemoveAll(report); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(report, 0o755); err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(report, "suite.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	timeout := max(time.Minute, time.Until(c.deadline)-time.Minute)
	cmd := exec.Command("nsenter", "-t", strconv.Itoa(c.init), "-n", suite,
		"-test.run="+cmp.Or(os.Getenv("CNIBOX_CNP_RUN"), "TestConformanceProfiles"), "-test.v",
		"-test.timeout="+timeout.Round(time.Second).String(),
		"--kubeconfig="+c.kubeconfig, "--conformance-profiles=ClusterNetworkPolicy",
		"--supported-features="+cnpFeatures,
		"--organization=cnibox", "--project=cnibox", "--url=https://github.com/cnibox/cnibox",
		"--version=dev", "--contact=cnibox", "--additional-info=make test-cnp (test/node TestKubeCNPConformance)",
		"--report-output="+filepath.Join(report, "report.yaml"))
	cmd.Env = append(os.Environ(), "KUBECONFIG="+c.kubeconfig)
	cmd.Dir = report
	cmd.Stdout, cmd.Stderr = logf, logf
	t.Logf("%s", strings.Join(cmd.Args, " "))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { // a Fatal below: the suite goes with the cluster
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
	}()
	if !sctp {
		c.withoutSCTPServers()
	}
	if err := cmd.Wait(); err != nil {
		t.Logf("the suite: %v (its log says which tests failed)", err)
	}
	res, err := readCNPLog(logPath)
	if err != nil || len(res) == 0 {
		data, _ := os.ReadFile(logPath)
		lines := strings.Split(strings.TrimSpace(string(data)), "\n")
		t.Fatalf("%s: %d results, %v; it ends:\n%s", logPath, len(res), err, strings.Join(lines[max(0, len(lines)-60):], "\n"))
	}
	return res
}

// readCNPLog reads the conformance tests' results from the suite's go test
// -v output; a failed test's failure is its lines that say what failed.
func readCNPLog(path string) ([]specResult, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	state := map[string]string{"PASS": "passed", "FAIL": "failed", "SKIP": "skipped"}
	var res []specResult
	lines := map[string][]string{} // a test's failure lines, by its name
	var current string             // the test of the last === RUN
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if m := cnpResult.FindStringSubmatch(line); m != nil {
			r := specResult{name: m[2], state: state[m[1]]}
			if r.state == "failed" {
				r.failure = strings.Join(lines[m[2]], "\n")
			}
			res = append(res, r)
			continue
		}
		if run, ok := strings.CutPrefix(line, "=== RUN   TestConformanceProfiles/"); ok {
			current, _, _ = strings.Cut(run, "/")
			continue
		}
		if current != "" && (strings.Contains(line, "FAIL") || strings.Contains(line, "Error")) {
			lines[current] = append(lines[current], line)
		}
	}
	return res, sc.Err()
}

// sctpSockets reports whether this kernel opens SCTP sockets (the pods'
// kernel: the nodes are namespaces of this machine).
func sctpSockets() bool {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, syscall.IPPROTO_SCTP)
	if err != nil {
		return false
	}
	syscall.Close(fd)
	return true
}

// cnpStatefulSets are the suite's base StatefulSets (conformance/base/manifests.yaml).
var cnpStatefulSets = map[string]string{
	"network-policy-conformance-gryffindor":        "harry-potter",
	"network-policy-conformance-slytherin":         "draco-malfoy",
	"network-policy-conformance-hufflepuff":        "cedric-diggory",
	"network-policy-conformance-ravenclaw":         "luna-lovegood",
	"network-policy-conformance-forbidden-forrest": "centaur",
}

// withoutSCTPServers waits for the suite's StatefulSets and has each
// container with a SERVE_SCTP_PORT_* variable run `agnhost pause`, then
// deletes their pods (a StatefulSet's rolling update waits on a pod that
// never turns Ready): the controller starts them again from the new
// template, every other container as the suite wrote it.
func (c *cluster) withoutSCTPServers() {
	t := c.t
	t.Helper()
	for ns, name := range cnpStatefulSets {
		var ss appsv1.StatefulSet
		c.poll("the suite's StatefulSet "+ns+"/"+name, func() error {
			out, err := c.kubectl("-n", ns, "get", "statefulset", name, "-o", "json")
			if err != nil {
				return err
			}
			return json.Unmarshal([]byte(out), &ss)
		})
		var ops []string
		for i, ct := range ss.Spec.Template.Spec.Containers {
			for _, e := range ct.Env {
				if strings.HasPrefix(e.Name, "SERVE_SCTP_PORT_") {
					ops = append(ops, fmt.Sprintf(`{"op":"replace","path":"/spec/template/spec/containers/%d/command","value":["/agnhost","pause"]}`, i))
					break
				}
			}
		}
		if len(ops) == 0 {
			continue
		}
		c.must("-n", ns, "patch", "statefulset", name, "--type=json", "-p", "["+strings.Join(ops, ",")+"]")
		sel := metav1.FormatLabelSelector(ss.Spec.Selector)
		c.must("-n", ns, "delete", "pod", "-l", sel, "--wait=false")
		t.Logf("%s/%s: %d SCTP servers run agnhost pause", ns, name, len(ops))
	}
}

// sctpOnly reports whether a failure's failed pokes are all SCTP ones.
func sctpOnly(failure string) bool {
	n := 0
	for _, l := range strings.Split(failure, "\n") {
		if strings.Contains(l, "FAILED Command was") {
			if !strings.Contains(l, "--protocol=sctp") {
				return false
			}
			n++
		}
	}
	return n > 0
}

// cnpJudge writes results.tsv (test, state) and the summary line
// (`conformance cnp: N passed, M failed, K skipped`, and how many of the
// failed failed on SCTP pokes alone) into report and fails the test for
// each failure, except, without sctp, one of SCTP pokes alone.
func (c *cluster) cnpJudge(report string, res []specResult, sctp bool) {
	t := c.t
	t.Helper()
	var tsv strings.Builder
	count := map[string]int{}
	noSCTP := 0
	for _, r := range res {
		fmt.Fprintf(&tsv, "%s\t%s\n", r.name, r.state)
		count[r.state]++
		if r.state != "failed" {
			continue
		}
		lines := strings.Split(r.failure, "\n")
		tail := strings.Join(lines[max(0, len(lines)-40):], "\n")
		if !sctp && sctpOnly(r.failure) {
			noSCTP++
			t.Logf("failed on SCTP pokes alone (this kernel has no SCTP sockets): %s", r.name)
			continue
		}
		t.Errorf("failed: %s\n%s", r.name, tail)
	}
	summary := fmt.Sprintf("conformance cnp: %d passed, %d failed, %d skipped", count["passed"], count["failed"], count["skipped"])
	if noSCTP > 0 {
		summary += fmt.Sprintf(" (%d of the failed on SCTP pokes alone: this kernel has no SCTP sockets)", noSCTP)
	}
	if err := os.WriteFile(filepath.Join(report, "results.tsv"), []byte(tsv.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(report, "summary"), []byte(summary+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Log(summary)
}
