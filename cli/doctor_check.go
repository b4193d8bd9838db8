package cli

import (
	"fmt"
	"os"
	"strings"

	ucli "github.com/urfave/cli/v2"

	"github.com/cnibox/cnibox/netops"
)

// checkConfDir runs `cnibox check` over the conf dir as the runtime reads
// it: an error it finds fails (the runtime's ADD would fail on it), a field
// no plugin reads warns. The findings of each network's file are kept, so
// that a failing check of one of its endpoints names them (pointAtConfig):
// a gateway missing because of "isGatway" says so. The interfaces the
// configs name are looked for in host, the node's namespace (check --node).
func (d *doctor) checkConfDir(c *ucli.Context, host *netops.Handle) {
	dir := c.String("conf-dir")
	if d.roles == nil {
		return
	}
	if _, err := os.Stat(dir); err != nil {
		return // checkConfig reports a missing conf dir
	}
	dirs, _ := binDirs(c) // runDoctor refused an empty list
	ck := checker{reg: d.roles, binDirs: dirs, host: host}
	clean := 0
	for _, f := range ck.dir(dir) {
		if len(f.Findings) == 0 {
			clean++
			continue
		}
		for _, x := range f.Findings {
			where := f.File
			if x.Path != "" {
				where += ": " + x.Path
			}
			line := fmt.Sprintf("%s: %s", where, x.Message)
			if x.Severity == sevError {
				d.fail("config check", x.Fix, "%s", line)
			} else {
				d.warn("config check", x.Fix, "%s", line)
			}
			if f.Network != "" && f.ShadowedBy == "" {
				if d.confFindings == nil {
					d.confFindings = map[string][]string{}
				}
				d.confFindings[f.Network] = append(d.confFindings[f.Network], line)
			}
		}
	}
	if clean > 0 {
		d.pass("config check", "%d file(s) in %s: cnibox check finds nothing", clean, dir)
	}
}

// pointAtConfig adds to the fix of each failing check of an endpoint what
// cnibox check found in its network's config: the likelier cause.
func (d *doctor) pointAtConfig() {
	for i := range d.results {
		r := &d.results[i]
		if r.Status != statusFail || r.Subject == "" {
			continue
		}
		network, _, _ := strings.Cut(r.Subject, "/")
		found := d.confFindings[network]
		if len(found) == 0 {
			continue
		}
		hint := "network " + network + "'s config may be why (cnibox check): " + strings.Join(found, "; ")
		if r.Fix == "" {
			r.Fix = hint
		} else {
			r.Fix += "; " + hint
		}
	}
}
