package cli

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	ucli "github.com/urfave/cli/v2"
)

// logTable prints a log's records as `cnibox logs` and `cnibox flows` do:
// each line as it is with --json, else a table under header; with
// --follow each is flushed at once.
type logTable struct {
	out           *bufio.Writer
	header        string
	json, follow  bool
	headerPrinted bool
}

func newLogTable(c *ucli.Context, header string) *logTable {
	return &logTable{out: bufio.NewWriter(c.App.Writer), header: header, json: c.Bool("json"), follow: c.Bool("follow")}
}

// print prints one record: line with --json, else row() under the header.
func (t *logTable) print(line []byte, row func() string) error {
	switch {
	case t.json:
		t.out.Write(line)
		t.out.WriteByte('\n')
	case !t.headerPrinted:
		t.headerPrinted = true
		fmt.Fprintln(t.out, t.header)
		fallthrough
	default:
		fmt.Fprintln(t.out, row())
	}
	if t.follow {
		return t.out.Flush()
	}
	return nil
}

// run reads the log with read, or with follow until Ctrl-C (or SIGTERM)
// when --follow is set, then flushes what is left.
func (t *logTable) run(c *ucli.Context, read, follow func(ctx context.Context) error) error {
	defer t.out.Flush()
	if !t.follow {
		return read(context.Background())
	}
	ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
	defer stop()
	return follow(ctx)
}

// logReader is a command that reads a rotated log as logTable prints it
// (logs, flows): one help text says for both where the log comes from, the
// table's columns, the order of the files and what --follow and --since
// do; one list of flags ends with --since, --follow and --json.
type logReader struct {
	name, usage, usageText string
	// source says where the log comes from (a sentence).
	source string
	// one names a record, what several ("call", "calls").
	one, what string
	// columns are the table's columns, and any line that is not a record.
	columns  string
	examples []string
	// flags are the log's file and filters.
	flags  []ucli.Flag
	action ucli.ActionFunc
}

// command is the reader's command.
func (r logReader) command() *ucli.Command {
	about := r.source + " The rotated files are read oldest first, then the live one. A table, one line a " + r.one + ": " +
		r.columns + " --follow alone shows new " + r.what + " as they come; with --since, from then on. Ctrl-C ends it."
	desc := wrapHelp(about, 100)
	for _, e := range r.examples {
		desc += "\nExample: " + e
	}
	return &ucli.Command{Name: r.name, Usage: r.usage, UsageText: r.usageText, Description: desc,
		Flags: logReaderFlags(r.what, r.flags...), Action: r.action}
}

// wrapHelp breaks s into lines of at most width characters, between words.
func wrapHelp(s string, width int) string {
	var b strings.Builder
	n := 0
	for _, w := range strings.Fields(s) {
		switch {
		case n == 0:
		case n+1+len(w) > width:
			b.WriteByte('\n')
			n = 0
		default:
			b.WriteByte(' ')
			n++
		}
		b.WriteString(w)
		n += len(w)
	}
	return b.String()
}

// logReaderFlags are the flags of a command that reads a rotated log as
// logTable prints it (logs, flows): the log's file and filters, then
// --since, --follow and --json; what names its records ("calls").
func logReaderFlags(what string, fileAndFilters ...ucli.Flag) []ucli.Flag {
	return append(fileAndFilters,
		&ucli.DurationFlag{Name: "since", Usage: "only " + what + " in the last `DURATION` (e.g. 30m)"},
		&ucli.BoolFlag{Name: "follow", Aliases: []string{"f"}, Usage: "keep reading: show new " + what + " as they are written (across rotations), until Ctrl-C"},
		&ucli.BoolFlag{Name: "json", Usage: "print the records as they are in the file, one JSON object a line"},
	)
}
