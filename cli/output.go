package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	ucli "github.com/urfave/cli/v2"

	"github.com/cnibox/cnibox/store"
)

// writeJSON prints v as indented JSON.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// newTable returns a writer that aligns tab-separated columns.
func newTable(w io.Writer) *tabwriter.Writer {
	return tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
}

// row writes one tab-separated line.
func row(w io.Writer, cols ...string) {
	fmt.Fprintln(w, strings.Join(cols, "\t"))
}

// section prints, unless xs is empty, a blank line and a table of xs: the
// header, then the columns cols gives for each x.
func section[T any](w io.Writer, xs []T, header []string, cols func(x T) []string) {
	if len(xs) == 0 {
		return
	}
	fmt.Fprintln(w)
	tw := newTable(w)
	row(tw, header...)
	for _, x := range xs {
		row(tw, cols(x)...)
	}
	tw.Flush()
}

// short shortens a container ID for a table.
func short(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

// orDash is s, or "-" when s is empty.
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// joinStrings formats a list of Stringers separated by commas.
func joinStrings[T fmt.Stringer](xs []T) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = x.String()
	}
	return strings.Join(parts, ",")
}

// podName is "namespace/name", or "" when the runtime gave no pod.
func podName(ep store.Endpoint) string {
	if ep.PodName == "" {
		return ""
	}
	return ep.PodNamespace + "/" + ep.PodName
}

// show prints what a command found: as JSON with --json, else with text.
// When failed is not nil and reports true for v, the exit code is 1 with no
// further message (what was printed says why).
func show[T any](c *ucli.Context, v T, text func(w io.Writer, v T) error, failed func(v T) bool) error {
	if c.Bool("json") {
		if err := writeJSON(c.App.Writer, v); err != nil {
			return err
		}
	} else if err := text(c.App.Writer, v); err != nil {
		return err
	}
	if failed != nil && failed(v) {
		return &exitError{code: 1}
	}
	return nil
}

// nonNil is s, or an empty slice for nil: JSON shows [] rather than null.
func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// exitError is an error that sets the exit code without further message
// when msg is empty (the command already printed why).
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }
func (e *exitError) ExitCode() int { return e.code }
