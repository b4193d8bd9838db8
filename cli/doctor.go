package cli

import (
	"fmt"
	"io"
	"net/netip"
	"os"
	"slices"
	"strings"
	"syscall"

	ucli "github.com/urfave/cli/v2"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nft"
	"github.com/cnibox/cnibox/nodestate"
	"github.com/cnibox/cnibox/store"
)

// Check statuses.
const (
	statusPass = "pass"
	statusFail = "fail"
	statusWarn = "warn"
)

// checkResult is one line of `cnibox doctor`.
type checkResult struct {
	// Check names what was checked, e.g. "host veth", "ip_forward".
	Check string `json:"check"`
	checkSubject
	Status string `json:"status"`
	Detail string `json:"detail"`
	Fix    string `json:"fix,omitempty"`
}

// checkSubject is what a check is about.
type checkSubject struct {
	// Subject is the endpoint ("network/container/ifname"), "" for
	// node-wide checks.
	Subject string `json:"subject,omitempty"`
	Pod     string `json:"pod,omitempty"`
}

// doctor collects the results.
type doctor struct {
	results []checkResult
	at      checkSubject // the endpoint being checked
	// outsideNodeNS: doctor runs in another network namespace than the
	// node's (doctor_ns.go).
	outsideNodeNS bool
	// roles are the binary's roles: their declarations (cniplug.Known)
	// say what doctor checks of their endpoints and what they do on
	// purpose.
	roles *cniplug.Registry
	// view says where the node's state is, for the leftovers.
	view nodestate.Options
	// confFindings are what cnibox check found in each network's config
	// file (checkConfDir), for the failing checks of its endpoints.
	confFindings map[string][]string
}

// Pass, Fail and Warn report a roles' hook's results (cniplug.Reporter).
func (d *doctor) Pass(check, format string, args ...any) { d.pass(check, format, args...) }
func (d *doctor) Fail(check, fix, format string, args ...any) {
	d.fail(check, fix, format, args...)
}
func (d *doctor) Warn(check, fix, format string, args ...any) {
	d.warn(check, fix, format, args...)
}

func (d *doctor) add(status, check, detail, fix string) {
	d.results = append(d.results, checkResult{Check: check, checkSubject: d.at, Status: status, Detail: detail, Fix: fix})
}
func (d *doctor) pass(check, format string, args ...any) {
	d.add(statusPass, check, fmt.Sprintf(format, args...), "")
}
func (d *doctor) fail(check, fix, format string, args ...any) {
	d.add(statusFail, check, fmt.Sprintf(format, args...), fix)
}
func (d *doctor) warn(check, fix, format string, args ...any) {
	d.add(statusWarn, check, fmt.Sprintf(format, args...), fix)
}

func (o Options) runDoctor(c *ucli.Context, host *netops.Handle) error {
	if _, err := binDirs(c); err != nil {
		return err
	}
	d := &doctor{roles: o.Registry, view: o.viewOptions(c)}
	if c.IsSet("node-netns") {
		if _, err := os.Stat(c.String("node-netns")); err != nil {
			return usageError(c, fmt.Errorf("--node-netns: %w (give the node's network namespace file, e.g. /proc/1/ns/net or /run/netns/NAME)", err), false)
		}
	}
	d.checkNodeNS(selfNetNS, c.String("node-netns"))
	d.checkConfig(c)
	d.checkConfDir(c, host) // doctor_check.go
	d.checkStoreFile(c)
	eps, err := selectEndpoints(c)
	if err != nil {
		return err
	}
	filtered := c.String("pod") != "" || c.String("network") != "" || c.String("container") != ""
	if filtered && len(eps) == 0 {
		d.fail("endpoint", "the runtime has not run ADD for it on this node, or with another dataDir: see `cnibox logs --errors` and `cnibox inspect endpoints`",
			"no endpoint record matches --pod %q --network %q --container %q", c.String("pod"), c.String("network"), c.String("container"))
	}
	var overlays []store.OverlayState
	if err := readStore(c, func(st *store.Store) error {
		overlays, err = st.Overlays()
		return err
	}); err != nil {
		return err
	}
	d.checkNode(host, eps)
	for _, ep := range eps {
		d.checkEndpoint(host, ep, overlays)
	}
	d.at = checkSubject{}
	d.checkOverlays(host, overlays)
	d.checkServices(host) // doctor_services.go
	d.checkRoleNodes(c)   // inspect_roles.go
	d.checkClusterIPAM(c) // inspect_cluster.go
	if !filtered {
		d.checkLeftovers(host)
	}
	d.pointAtConfig()
	return show(c, d.results, printDoctor, func(results []checkResult) bool {
		return slices.ContainsFunc(results, func(r checkResult) bool { return r.Status == statusFail })
	})
}

// checkStoreFile warns about store files set aside as torn by an unclean
// shutdown (the store started empty then; see store.EnvSync). Nothing is
// reported when there are none.
func (d *doctor) checkStoreFile(c *ucli.Context) {
	dir := store.Dir(c.String("data-dir"))
	d.checkDataDirMode(dir)
	torn, err := store.TornFiles(dir)
	if err != nil || len(torn) == 0 {
		return
	}
	d.warn("store", "nothing to repair: the pods of this boot are recorded in the new store; remove the kept file(s) once no post-mortem needs them",
		"the store was torn by an unclean shutdown of an earlier boot and started empty; the torn file is kept as %s", strings.Join(torn, ", "))
}

// checkDataDirMode warns when users other than root can write the data
// directory: they could replace the store, plant a symlink in place of its
// files, or fill the disk cnibox writes to.
func (d *doctor) checkDataDirMode(dir string) {
	fi, err := os.Stat(dir)
	if err != nil {
		return // no store yet: nothing to check
	}
	var who []string
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Uid != 0 {
		who = append(who, fmt.Sprintf("its owner (uid %d)", st.Uid))
	}
	if fi.Mode().Perm()&0o020 != 0 {
		who = append(who, "its group")
	}
	if fi.Mode().Perm()&0o002 != 0 {
		who = append(who, "every user")
	}
	if len(who) == 0 {
		return
	}
	d.warn("data dir", fmt.Sprintf("chown root:root %s && chmod 0700 %s", dir, dir),
		"%s (mode %s) can be written by %s, not only root: they can replace the store or its files", dir, fi.Mode().Perm(), strings.Join(who, " and "))
}

// checkConfig: the active config is valid and its plugins are installed.
func (d *doctor) checkConfig(c *ucli.Context) {
	rep := inspectConfig(c.Context, c.String("conf-dir"), c.String("bin-dir"))
	if rep.Active == nil {
		d.fail("config", fmt.Sprintf("write a conflist to %s (examples/10-bridge.conflist is a start); `cnibox inspect config` shows what is there", rep.ConfDir),
			"%s: %s", rep.Reason, rep.Error)
		return
	}
	a := rep.Active
	if rep.Valid {
		d.pass("config", "%s: network %q (cniVersion %s) is what the runtime uses, and it validates", a.File, a.Network, a.CNIVersion)
	} else {
		d.fail("config", "fix the plugins below, or `cnibox inspect config` for details", "%s: network %q does not validate: %s", a.File, a.Network, orDash(rep.Error))
	}
	var ok []string
	for _, p := range rep.Plugins {
		if p.Error != "" {
			d.fail("plugin", p.Error, "%s (%s) in %s", p.Type, p.Kind, rep.BinDir)
			continue
		}
		ok = append(ok, p.Type)
	}
	if len(ok) > 0 {
		d.pass("plugins", "%s: found in %s, each speaks cniVersion %s", strings.Join(ok, ", "), rep.BinDir, a.CNIVersion)
	}
}

// checkNode: the bridges of the endpoints are up and IP forwarding is on
// for the families that have a gateway.
func (d *doctor) checkNode(host *netops.Handle, eps []store.Endpoint) {
	var bridges []string
	fams := map[bool]bool{} // is4 -> has a gateway
	for _, ep := range eps {
		if ep.Bridge != "" && !slices.Contains(bridges, ep.Bridge) {
			bridges = append(bridges, ep.Bridge)
		}
		if d.gatewayAt(ep) != cniplug.GatewayOnNode {
			continue // the node forwards nothing for a device on a LAN
		}
		for _, gw := range ep.Gateways {
			fams[gw.Is4()] = true
		}
	}
	for _, b := range bridges {
		l, err := host.LinkByName(b)
		switch {
		case err != nil:
			d.fail("bridge", d.nodeFix("the next ADD re-creates it, but the pods on it lost their network: re-create them"), "bridge %s is missing: %v", b, err)
		case !l.Up:
			d.fail("bridge", d.nodeFix("ip link set "+b+" up"), "bridge %s is down", b)
		default:
			addrs, _ := host.Addrs(b)
			d.pass("bridge", "bridge %s is up, mtu %d, addresses %s", b, l.MTU, orDash(strings.ReplaceAll(joinStrings(addrs), ",", " ")))
		}
	}
	for _, is4 := range []bool{true, false} {
		if !fams[is4] {
			continue
		}
		key := "net.ipv4.ip_forward"
		if !is4 {
			key = "net.ipv6.conf.all.forwarding"
		}
		v, err := host.Sysctl(key)
		switch {
		case err != nil:
			d.fail("forwarding", "", "read %s: %v", key, err)
		case v != "1":
			d.fail("forwarding", d.nodeFix(fmt.Sprintf("sysctl -w %s=1, and persist it in /etc/sysctl.d/ (something on the node turned it off; cnibox's bridge turns it on again at the next ADD with isGateway)", key)),
				"%s is %s: pods cannot reach beyond the node", key, v)
		default:
			d.pass("forwarding", "%s = 1", key)
		}
	}
	d.checkFastPath(host)
}

// checkFastPath reports the agent's fast path (cnibox-agent --fast-path),
// when the node has one: its devices and when it offloads.
func (d *doctor) checkFastPath(host *netops.Handle) {
	devs, rules, err := host.NFT().FastPath()
	switch {
	case err != nil:
		d.warn("fast path", "", "cannot read the fast path's table: %v", err)
	case devs == nil:
		return
	default:
		when := ""
		if len(rules) > 0 {
			when = "; " + strings.TrimPrefix(rules[len(rules)-1], "cnibox fast path: ")
		}
		d.pass("fast path", "established routed connections on %s leave the forward chains for a flowtable (table inet %s%s); every policy change takes them out; cnibox-agent --fast-path=false turns it off",
			orDash(strings.Join(devs, " ")), nft.FastPathTable, when)
	}
}

// checkLeftovers reports what `cnibox gc` would remove.
func (d *doctor) checkLeftovers(host *netops.Handle) {
	v, err := nodestate.ReadView(host, d.view)
	if err != nil {
		d.warn("leftovers", "", "cannot look for leftovers: %v", err)
		return
	}
	orphans := nodestate.Find(v)
	if len(orphans) == 0 {
		d.pass("leftovers", "no stale records, reservations, cbx veths, masquerade entries, port mappings or ifbs")
		return
	}
	var what []string
	for _, o := range orphans {
		what = append(what, o.Kind+" "+o.Subject())
	}
	d.warn("leftovers", "`cnibox gc --dry-run` lists them with the reason, `cnibox gc` removes them",
		"%d left behind by pods that are gone: %s", len(orphans), strings.Join(what, "; "))
}

func printDoctor(w io.Writer, results []checkResult) error {
	// Node-wide checks first, then each endpoint's.
	results = slices.Clone(results)
	slices.SortStableFunc(results, func(a, b checkResult) int {
		return cmpBool(a.Subject != "", b.Subject != "")
	})
	subject := "\x00"
	failed, warned := 0, 0
	for _, r := range results {
		if r.Subject != subject {
			subject = r.Subject
			if subject != "" {
				head := "endpoint " + subject
				if r.Pod != "" {
					head += " (pod " + r.Pod + ")"
				}
				fmt.Fprintln(w, head)
			} else {
				fmt.Fprintln(w, "node")
			}
		}
		mark := "PASS"
		switch r.Status {
		case statusFail:
			mark = "FAIL"
			failed++
		case statusWarn:
			mark = "WARN"
			warned++
		}
		fmt.Fprintf(w, "  %s  %-14s %s\n", mark, r.Check, r.Detail)
		if r.Fix != "" && r.Status != statusPass {
			fmt.Fprintf(w, "        fix: %s\n", r.Fix)
		}
	}
	switch {
	case failed > 0:
		fmt.Fprintf(w, "\n%d of %d checks failed\n", failed, len(results))
	case warned > 0:
		fmt.Fprintf(w, "\nall %d checks passed, %d warnings\n", len(results)-warned, warned)
	default:
		fmt.Fprintf(w, "\nall %d checks passed\n", len(results))
	}
	return nil
}

// cmpBool orders false before true.
func cmpBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case !a:
		return -1
	}
	return 1
}

// inPod is how a person runs a command inside the pod's netns.
func inPod(netns string) string {
	if name, ok := strings.CutPrefix(netns, netops.NamedNSDir+"/"); ok && !strings.Contains(name, "/") {
		return "ip -n " + name
	}
	if name, ok := strings.CutPrefix(netns, "/var/run/netns/"); ok && !strings.Contains(name, "/") {
		return "ip -n " + name
	}
	return "nsenter --net=" + netns + " ip"
}

// masqMapOf names the masquerade map of an address's family.
func masqMapOf(a netip.Addr) string {
	if a.Is4() {
		return "masq4"
	}
	return "masq6"
}
