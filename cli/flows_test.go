package cli

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/internal/flowlog"
)

// writeFlows writes recs to a new flow log and returns its path.
func writeFlows(t *testing.T, recs ...flowlog.Record) string {
	t.Helper()
	path := t.TempDir() + "/flows.log"
	w, err := flowlog.NewWriter(flowlog.Options{Path: path, Node: "node-1"})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if err := w.Write(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// testFlows are a denied, an allowed, a staged and a suppressed record, a
// minute apart, the last a minute ago.
func testFlows() []flowlog.Record {
	t0 := time.Now().Add(-4 * time.Minute).Truncate(time.Millisecond)
	ip := netip.MustParseAddr
	return []flowlog.Record{{
		Time: t0, Node: "node-1", Verdict: flowlog.Deny, Direction: flowlog.Ingress, Proto: "TCP",
		Src:    flowlog.Endpoint{IP: ip("10.88.1.5"), Port: 43122, Namespace: "shop", Pod: "web-0"},
		Dst:    flowlog.Endpoint{IP: ip("10.88.2.7"), Port: 5432, Namespace: "db", Pod: "pg-0"},
		Policy: &flowlog.Policy{Kind: flowlog.KindNetworkPolicy, Namespace: "db", Rule: flowlog.RuleIsolation, Isolating: []string{"pg-only"}},
	}, {
		Time: t0.Add(time.Minute), Node: "node-1", Verdict: flowlog.Allow, Direction: flowlog.Egress, Proto: "UDP",
		Src:    flowlog.Endpoint{IP: ip("fd00::5"), Port: 5353, Namespace: "shop", Pod: "web-0"},
		Dst:    flowlog.Endpoint{IP: ip("2001:db8::53"), Port: 53},
		Policy: &flowlog.Policy{Kind: flowlog.KindClusterNetworkPolicy, Name: "dns", Tier: flowlog.TierBaseline, Rule: "0"},
	}, {
		Time: t0.Add(2 * time.Minute), Node: "node-1", Verdict: flowlog.StagedDeny, Direction: flowlog.Ingress, Proto: "ICMP",
		Src:    flowlog.Endpoint{IP: ip("192.0.2.1")},
		Dst:    flowlog.Endpoint{IP: ip("10.88.1.5"), Namespace: "shop", Pod: "web-0"},
		Policy: &flowlog.Policy{Kind: flowlog.KindStagedNetworkPolicy, Namespace: "shop", Name: "lockdown", Rule: "1"},
	}, {
		Time: t0.Add(3 * time.Minute), Node: "node-1", Verdict: flowlog.Suppressed,
		Suppressed: &flowlog.Summary{Count: 1234, Since: t0.Add(3*time.Minute - time.Second),
			Top: []flowlog.Pair{{Src: ip("10.88.1.5"), Dst: ip("10.88.2.7"), Count: 1200}}},
	}}
}

// TestFlowsTable: the table, one line a flow, and the suppressed line.
func TestFlowsTable(t *testing.T) {
	recs := testFlows()
	path := writeFlows(t, recs...)
	hms := func(t time.Time) string { return t.Local().Format("15:04:05.000") }
	want := []string{
		"TIME         VERDICT      DIR PROTO  SRC                 DST                 POLICY",
		hms(recs[0].Time) + " deny         in  TCP    shop/web-0:43122    db/pg-0:5432        np/db/pg-only#isolation",
		hms(recs[1].Time) + " allow        out UDP    shop/web-0:5353     [2001:db8::53]:53   cnp:baseline/dns#0",
		hms(recs[2].Time) + " staged-deny  in  ICMP   192.0.2.1           shop/web-0          snp/shop/lockdown#1",
		hms(recs[3].Time) + " suppressed   1234 flows over the rate limit, most 10.88.1.5 -> 10.88.2.7 (1200)",
	}
	out, errs, code := runApp("flows", "--file", path)
	if code != 0 || errs != "" {
		t.Fatalf("exit %d, stderr %q", code, errs)
	}
	if got := strings.Split(strings.TrimSuffix(out, "\n"), "\n"); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("table:\n%s\nwant:\n%s", out, strings.Join(want, "\n"))
	}
	for _, l := range strings.Split(out, "\n") {
		if len(l) > 100 {
			t.Errorf("line of %d columns: %q", len(l), l)
		}
	}

	// Filters: the suppressed line stays (what it counts may be a match).
	for _, tc := range []struct {
		args []string
		want []int
	}{
		{[]string{"--verdict", "deny"}, []int{0, 3}},
		{[]string{"--namespace", "db"}, []int{0, 3}},
		{[]string{"--pod", "shop/web-0", "--verdict", "allow"}, []int{1, 3}},
		{[]string{"--policy", "shop/lockdown"}, []int{2, 3}},
		{[]string{"--policy", "pg-only"}, []int{0, 3}},
		{[]string{"--since", "150s"}, []int{2, 3}},
	} {
		out, _, code := runApp(append([]string{"flows", "--file", path}, tc.args...)...)
		var wantOut []string
		for _, i := range tc.want {
			wantOut = append(wantOut, want[i+1])
		}
		if got := strings.TrimSuffix(out, "\n"); code != 0 || got != want[0]+"\n"+strings.Join(wantOut, "\n") {
			t.Errorf("flows %v (exit %d):\n%s\nwant rows %v", tc.args, code, out, tc.want)
		}
	}
}

// TestFlowsService: a connection through a Service ends its line with
// the Service, named or, when the agent could not name it, its frontend.
func TestFlowsService(t *testing.T) {
	ip := netip.MustParseAddr
	t0 := time.Now().Add(-time.Minute).Truncate(time.Millisecond)
	rec := flowlog.Record{Time: t0, Node: "node-1", Verdict: flowlog.Allow, Direction: flowlog.Egress, Proto: "TCP",
		Src:     flowlog.Endpoint{IP: ip("10.88.1.5"), Port: 43122, Namespace: "shop", Pod: "web-0"},
		Dst:     flowlog.Endpoint{IP: ip("10.88.2.7"), Port: 5432, Namespace: "db", Pod: "pg-0"},
		Policy:  &flowlog.Policy{Kind: flowlog.KindNetworkPolicy, Namespace: "shop", Name: "out", Rule: "0"},
		Service: &flowlog.Service{IP: ip("10.96.0.20"), Port: 5432, Namespace: "db", Name: "pg", PortName: "sql"}}
	unnamed := rec
	unnamed.Service = &flowlog.Service{IP: ip("10.96.0.20"), Port: 5432}
	out, errs, code := runApp("flows", "--file", writeFlows(t, rec, unnamed))
	if code != 0 || errs != "" {
		t.Fatalf("exit %d, stderr %q", code, errs)
	}
	row := t0.Local().Format("15:04:05.000") + " allow        out TCP    shop/web-0:43122    db/pg-0:5432        np/shop/out#0 via "
	want := flowsHeader + "\n" + row + "svc/db/pg:sql\n" + row + "10.96.0.20:5432\n"
	if out != want {
		t.Errorf("table:\n%s\nwant:\n%s", out, want)
	}
}

// TestFlowsJSON: --json prints the records as they are in the file.
func TestFlowsJSON(t *testing.T) {
	path := writeFlows(t, testFlows()...)
	file, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out, _, code := runApp("flows", "--file", path, "--json")
	if code != 0 || out != string(file) {
		t.Errorf("--json (exit %d):\n%s\nwant the file:\n%s", code, out, file)
	}
	out, _, _ = runApp("flows", "--file", path, "--json", "--verdict", "staged-deny")
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 2 || !strings.Contains(lines[0], `"verdict":"staged-deny"`) {
		t.Errorf("--json --verdict staged-deny:\n%s", out)
	}
}

// TestFlowsUsage: a wrong command line exits 64 with one line and the
// pointer to --help; a missing log exits 1 saying where it looked and what
// turns the log on.
func TestFlowsUsage(t *testing.T) {
	path := writeFlows(t)
	for _, args := range [][]string{
		{"--verdict", "dropped"},
		{"--pod", "a/b/c"},
		{"--policy", "/x"},
		{"--since", "-5m"},
		{"--since", "yesterday"},
		{"shop"},
	} {
		out, errs, code := runApp(append([]string{"flows", "--file", path}, args...)...)
		lines := strings.Split(strings.TrimSpace(errs), "\n")
		if code != exitUsage || len(lines) != 2 || !strings.HasPrefix(lines[1], "Run 'cnibox flows --help'") || out != "" {
			t.Errorf("flows %v: exit %d, stdout %q, stderr:\n%s", args, code, out, errs)
		}
	}

	missing := t.TempDir() + "/flows.log"
	app := newApp(Options{Version: "test", Registry: cniplug.NewRegistry()})
	var out, errb bytes.Buffer
	app.Writer, app.ErrWriter = &out, &errb
	err := app.Run([]string{"cnibox", "flows", "--file", missing})
	if err == nil || !strings.Contains(err.Error(), missing) || !strings.Contains(err.Error(), "--flow-log") ||
		!strings.Contains(err.Error(), "cnibox.io/flow-log") || out.Len() != 0 {
		t.Errorf("missing log: %v, stdout %q", err, out.String())
	}
}

// TestFlowsFollow: --follow alone shows the flows written after it
// started, not the ones before, and ends without an error when stopped.
func TestFlowsFollow(t *testing.T) {
	recs := testFlows()
	path := t.TempDir() + "/flows.log"
	w, err := flowlog.NewWriter(flowlog.Options{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	w.Write(recs[0])
	app := newApp(Options{Version: "test", Registry: cniplug.NewRegistry()})
	pr, pw := io.Pipe()
	app.Writer, app.ErrWriter = pw, pw
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- app.RunContext(ctx, []string{"cnibox", "flows", "--file", path, "--follow", "--json"})
		pw.Close()
	}()
	// Write a staged-deny record every 100 ms until the follower, which
	// started at the file's end at some moment, shows one (30 s at most).
	stop := every(100*time.Millisecond, func() { w.Write(recs[2]) })
	timeout := time.AfterFunc(30*time.Second, cancel)
	defer timeout.Stop()
	sc := bufio.NewScanner(pr)
	first := ""
	if sc.Scan() {
		first = sc.Text()
	}
	stop()
	cancel()
	go io.Copy(io.Discard, pr)
	if err := <-done; err != nil {
		t.Errorf("--follow stopped: %v", err)
	}
	if !strings.Contains(first, `"verdict":"staged-deny"`) {
		t.Errorf("--follow printed first %q, want a staged-deny record written after it started (not the deny before)", first)
	}
}
