package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"time"

	ucli "github.com/urfave/cli/v2"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/internal/logrotate"
)

// logFile is the log of --file, else $CNIBOX_LOG_FILE, else the default.
func logFile(c *ucli.Context) string {
	if f := c.String("file"); f != "" {
		return f
	}
	if f := os.Getenv("CNIBOX_LOG_FILE"); f != "" {
		return f
	}
	return cniplug.DefaultLogFile
}

// logsHeader heads the table of `cnibox logs`; formatRecord's widths
// match it.
const logsHeader = "TIME                    ROLE       VERB   CONTAINER    IFNAME NETWORK        TOOK  RESULT"

// runLogs is `cnibox logs`: the CNI calls' log, the rotated files oldest
// first then the live one (read, and with --follow followed across
// rotations, by internal/logrotate), as a table or the lines as they are.
func runLogs(c *ucli.Context) error {
	if c.Args().Present() {
		return usageError(c, fmt.Errorf("no argument expected, got %q (filters are flags)", c.Args().First()), false)
	}
	var since time.Time
	if d := c.Duration("since"); d < 0 {
		return usageError(c, fmt.Errorf("--since %v: want a positive duration (e.g. 30m)", d), false)
	} else if d > 0 {
		since = time.Now().Add(-d)
	}
	// --follow alone is the live view: new calls only; with --since, from then on.
	l := &logrotate.Lines{Path: logFile(c), Since: since, FromEnd: c.Bool("follow") && since.IsZero()}
	t := newLogTable(c, logsHeader)
	each := func(line []byte) error {
		var rec map[string]any
		if json.Unmarshal(line, &rec) != nil || !keepRecord(c, rec, since) {
			return nil
		}
		return t.print(line, func() string { return formatRecord(rec) })
	}
	err := t.run(c, func(ctx context.Context) error { return l.Read(ctx, each) },
		func(ctx context.Context) error { return l.Follow(ctx, each) })
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("no log file at %s: set logFile in the config or CNIBOX_LOG_FILE if it lives elsewhere, "+
			"or --file (every CNI call of cnibox appends to it; none has run here yet?)", l.Path)
	}
	return err
}

func keepRecord(c *ucli.Context, rec map[string]any, since time.Time) bool {
	if id := c.String("container"); id != "" {
		if s, _ := rec["container"].(string); !strings.HasPrefix(s, id) {
			return false
		}
	}
	if c.Bool("errors") && rec["msg"] != "error" {
		return false
	}
	if !since.IsZero() {
		ts, _ := rec["time"].(string)
		t, err := time.Parse(time.RFC3339Nano, ts)
		if err != nil || t.Before(since) {
			return false
		}
	}
	return true
}

func formatRecord(rec map[string]any) string {
	str := func(k string) string { s, _ := rec[k].(string); return s }
	ts := str("time")
	if t, err := time.Parse(time.RFC3339Nano, ts); err == nil {
		ts = t.Local().Format("2006-01-02 15:04:05.000")
	}
	id := str("container")
	if len(id) > 12 {
		id = id[:12]
	}
	took := ""
	if n, ok := rec["took"].(float64); ok {
		took = time.Duration(n).Round(10 * time.Microsecond).String()
	}
	line := fmt.Sprintf("%s %-10s %-6s %-12s %-6s %-10s %8s", ts, str("role"), str("command"), id, str("ifname"), str("network"), took)
	if rec["msg"] == "error" {
		code, _ := rec["code"].(float64)
		line += fmt.Sprintf("  ERROR %d: %s", int(code), str("error"))
	} else {
		line += "  ok"
	}
	return line
}
