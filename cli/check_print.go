package cli

import (
	"fmt"
	"io"
	"strings"
)

// printConfigCheck prints the report, one line a finding.
func printConfigCheck(w io.Writer, rep checkReport) error {
	if rep.OffNode != "" {
		fmt.Fprintf(w, "off a node (%s): cnibox's roles count as present in the bin dirs and the node's interfaces are not looked at (--node checks as on a node)\n", rep.OffNode)
	}
	for _, f := range rep.Files {
		head := f.File
		if f.Network != "" {
			head += fmt.Sprintf(" (network %q)", f.Network)
		}
		if f.Active {
			head += ", the default network of its dir"
		}
		status := "ok"
		if len(f.Findings) > 0 {
			status = fmt.Sprintf("%d finding(s)", len(f.Findings))
		}
		fmt.Fprintf(w, "%s: %s\n", head, status)
		printFindings(w, f.Findings)
	}
	fmt.Fprintf(w, "\n%d error(s), %d warning(s) in %d file(s)\n", rep.Errors, rep.Warnings, len(rep.Files))
	return nil
}

// printFindings prints findings, one line a finding and one a fix.
func printFindings(w io.Writer, findings []checkFinding) {
	for _, x := range findings {
		where := ""
		if x.Path != "" {
			where = x.Path + ": "
		}
		fmt.Fprintf(w, "  %s  %s%s\n", strings.ToUpper(x.Severity), where, x.Message)
		if x.Fix != "" {
			fmt.Fprintf(w, "         fix: %s\n", x.Fix)
		}
	}
}
