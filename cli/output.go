package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	ucli "github.com/urfave/cli/v2"

	"github.com/cnibox/cnibox/store"
)

// Flags shared by the read commands.
var (
	jsonFlag    = &ucli.BoolFlag{Name: "json", Usage: "print JSON (for scripts) instead of a table"}
	dataDirFlag = &ucli.StringFlag{Name: "data-dir", Usage: "store directory (default $CNIBOX_DATA_DIR or " + store.DefaultDir + ")"}
	confDirFlag = &ucli.StringFlag{Name: "conf-dir", Value: "/etc/cni/net.d", Usage: "the runtime's CNI config directory"}
	binDirFlag  = &ucli.StringFlag{Name: "bin-dir", Value: "/opt/cni/bin", Usage: "the runtime's CNI plugin directory"}
	cacheFlag   = &ucli.StringFlag{Name: "cache-dir", Value: "/var/lib/cni", Usage: "libcni's cache directory (the runtime's record of attachments)"}
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

// readStore opens the store of the --data-dir flag (or the environment's)
// without creating it, runs fn and closes it again. A store that was never
// created reads as empty: fn is not called and the error is nil.
func readStore(c *ucli.Context, fn func(st *store.Store) error) error {
	st, err := store.OpenWith(store.Dir(c.String("data-dir")), store.Options{NoCreate: true})
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	defer st.Close()
	return fn(st)
}

// exitError is an error that sets the exit code without further message
// when msg is empty (the command already printed why).
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }
func (e *exitError) ExitCode() int { return e.code }
