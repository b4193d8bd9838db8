package cli

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"strconv"
	"strings"
	"time"

	ucli "github.com/urfave/cli/v2"

	"github.com/cnibox/cnibox/internal/flowlog"
)

// flowsHeader heads the table of `cnibox flows`; flowRow's widths match it.
const flowsHeader = "TIME         VERDICT      DIR PROTO  SRC                 DST                 POLICY"

// runFlows is `cnibox flows`: the node's policy flow log, read (and
// followed) by internal/flowlog, as a table or the lines as they are.
func runFlows(c *ucli.Context) error {
	if c.Args().Present() {
		return usageError(c, fmt.Errorf("no argument expected, got %q (filters are flags)", c.Args().First()), false)
	}
	f := flowlog.Filter{
		Namespace: c.String("namespace"),
		Pod:       c.String("pod"),
		Verdict:   flowlog.Verdict(c.String("verdict")),
		Policy:    c.String("policy"),
	}
	if d := c.Duration("since"); d < 0 {
		return usageError(c, fmt.Errorf("--since %v: want a positive duration (e.g. 30m)", d), false)
	} else if d > 0 {
		f.Since = time.Now().Add(-d)
	}
	if err := f.Check(); err != nil {
		return usageError(c, err, false)
	}
	// --follow alone is the live view: new flows only; with --since, from then on.
	r := &flowlog.Reader{Path: c.String("file"), Filter: f, FromEnd: c.Bool("follow") && f.Since.IsZero()}
	t := newLogTable(c, flowsHeader)
	each := func(rec *flowlog.Record, line []byte) error {
		return t.print(line, func() string { return flowRow(rec) })
	}
	err := t.run(c, func(ctx context.Context) error { return r.Read(ctx, each) },
		func(ctx context.Context) error { return r.Follow(ctx, each) })
	if n := r.Skipped(); n > 0 {
		fmt.Fprintf(c.App.ErrWriter, "cnibox flows: passed over %d lines of %s that are no flow record\n", n, r.Path)
	}
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("no flow log at %s: the flow log is off unless cnibox-agent's --flow-log or a namespace's "+
			"cnibox.io/flow-log annotation turns it on (docs/policy.md); --file names another file", r.Path)
	}
	return err
}

// flowRow is a record as one line of the table: the time (local, to the
// millisecond), verdict, direction, protocol, source, destination and the
// deciding policy, then, for a connection through a Service, "via" and
// the Service; a suppressed record says how many and its top pair.
// The widths fit 100 columns for names of a usual length; a longer one
// pushes the rest of its line, never cut.
func flowRow(r *flowlog.Record) string {
	ts := r.Time.Local().Format("15:04:05.000")
	if s := r.Suppressed; r.Verdict == flowlog.Suppressed && s != nil {
		line := fmt.Sprintf("%-12s %-12s %d flows over the rate limit", ts, r.Verdict, s.Count)
		if len(s.Top) > 0 {
			line += fmt.Sprintf(", most %v -> %v (%d)", s.Top[0].Src, s.Top[0].Dst, s.Top[0].Count)
		}
		return line
	}
	dir := "in"
	if r.Direction == flowlog.Egress {
		dir = "out"
	}
	why := flowPolicy(r.Policy)
	if r.Reason != "" {
		why, dir = r.Reason, "-" // no policy, no direction: dropped before both (an INVALID packet)
	}
	line := fmt.Sprintf("%-12s %-12s %-3s %-6s %-19s %-19s %s", ts, r.Verdict, dir, r.Proto, flowEnd(r.Src), flowEnd(r.Dst), why)
	if r.Service != nil {
		line += " via " + flowService(r.Service)
	}
	return line
}

// flowService is the Service a connection went to as svc/ns/name, with
// :portname for a named port; the frontend ip:port when the agent could
// not name it.
func flowService(s *flowlog.Service) string {
	if s.Name == "" {
		return netip.AddrPortFrom(s.IP, s.Port).String()
	}
	name := "svc/" + s.Namespace + "/" + s.Name
	if s.PortName != "" {
		name += ":" + s.PortName
	}
	return name
}

// flowEnd is an endpoint as ns/pod:port, or ip:port outside the cluster.
func flowEnd(e flowlog.Endpoint) string {
	switch {
	case e.Pod != "" && e.Port != 0:
		return e.Namespace + "/" + e.Pod + ":" + strconv.Itoa(int(e.Port))
	case e.Pod != "":
		return e.Namespace + "/" + e.Pod
	case e.Port != 0:
		return netip.AddrPortFrom(e.IP, e.Port).String()
	}
	return e.IP.String()
}

// flowPolicy is the deciding policy as kind/ns/name#rule: np, cnp, snp,
// scnp for the kinds (a ClusterNetworkPolicy's tier after a colon,
// cnp:admin), the isolating policies for a drop by isolation; "-" for none.
func flowPolicy(p *flowlog.Policy) string {
	if p == nil {
		return "-"
	}
	kind := p.Kind
	switch p.Kind {
	case flowlog.KindNetworkPolicy:
		kind = "np"
	case flowlog.KindClusterNetworkPolicy:
		kind = "cnp"
	case flowlog.KindStagedNetworkPolicy:
		kind = "snp"
	case flowlog.KindStagedClusterNetworkPolicy:
		kind = "scnp"
	}
	if p.Tier != "" {
		kind += ":" + strings.ToLower(p.Tier)
	}
	name := p.Name
	if p.Rule == flowlog.RuleIsolation && len(p.Isolating) > 0 {
		name = strings.Join(p.Isolating, ",")
	}
	if p.Namespace != "" {
		name = p.Namespace + "/" + name
	}
	return kind + "/" + name + "#" + p.Rule
}
