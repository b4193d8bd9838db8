package cli

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"time"

	ucli "github.com/urfave/cli/v2"

	"github.com/cnibox/cnibox/cniplug"
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

func runLogs(c *ucli.Context) error {
	path := logFile(c)
	// Rotated files (name-<time>.log) first, oldest first, then the live one.
	backups := cniplug.LogBackups(path)
	files := append(backups, path)
	var since time.Time
	if d := c.Duration("since"); d > 0 {
		since = time.Now().Add(-d)
	}
	found := false
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			if f == path && len(backups) == 0 {
				return fmt.Errorf("read the log: %w (set logFile in the config or CNIBOX_LOG_FILE if it lives elsewhere)", err)
			}
			continue
		}
		found = true
		sc := bufio.NewScanner(fh)
		sc.Buffer(make([]byte, 64<<10), 4<<20)
		for sc.Scan() {
			var rec map[string]any
			if json.Unmarshal(sc.Bytes(), &rec) != nil {
				continue
			}
			if !keepRecord(c, rec, since) {
				continue
			}
			if c.Bool("json") {
				fmt.Fprintln(c.App.Writer, sc.Text())
				continue
			}
			fmt.Fprintln(c.App.Writer, formatRecord(rec))
		}
		fh.Close()
	}
	if !found {
		return fmt.Errorf("no log file at %s", path)
	}
	return nil
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
