package flowlog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/cnibox/cnibox/internal/logrotate"
)

const (
	// DefaultPoll is how often a follower at the live file's end looks for
	// new lines and for a rotation.
	DefaultPoll = logrotate.DefaultPoll
	// maxLine bounds a line; a longer one is no record (skipped).
	maxLine = 1 << 20
)

// Reader reads the flow log: the backups oldest first, then the live file,
// each record Filter selects.
type Reader struct {
	// Path is the live file (DefaultPath).
	Path   string
	Filter Filter
	// Poll is Follow's wait at the live file's end (DefaultPoll).
	Poll time.Duration
	// FromEnd starts at the live file's end: Follow shows new records only.
	FromEnd bool

	skipped int // lines that are no record
	lines   logrotate.Lines
}

// Skipped is how many lines were passed over because they are no record
// (not JSON, no time or verdict, longer than a record can be, cut short).
func (r *Reader) Skipped() int { return r.skipped + r.lines.Skipped() }

// Read calls fn for every record selected, with its line as it is in the
// file (the newline left out), until the end of the live file or an error
// of fn's. No file at Path and no backup is an error that wraps
// fs.ErrNotExist.
func (r *Reader) Read(ctx context.Context, fn func(rec *Record, line []byte) error) error {
	return r.run(ctx, false, fn)
}

// Follow is Read that, at the live file's end, waits for more, and goes on
// across rotations (to the next backup when it fell behind, then the new
// live file) and a truncation (the file read again from its start), until
// ctx ends; then it returns nil.
func (r *Reader) Follow(ctx context.Context, fn func(rec *Record, line []byte) error) error {
	return r.run(ctx, true, fn)
}

func (r *Reader) run(ctx context.Context, follow bool, fn func(*Record, []byte) error) error {
	if r.Path == "" {
		r.Path = DefaultPath
	}
	r.lines = logrotate.Lines{Path: r.Path, Since: r.Filter.Since, FromEnd: r.FromEnd, Poll: r.Poll, MaxLine: maxLine}
	each := func(line []byte) error { return r.emit(line, fn) }
	var err error
	if follow {
		err = r.lines.Follow(ctx, each)
	} else {
		err = r.lines.Read(ctx, each)
	}
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("no flow log at %s: %w", r.Path, err)
	}
	return err
}

// emit decodes line and hands it to fn when the filter selects it.
func (r *Reader) emit(line []byte, fn func(*Record, []byte) error) error {
	var rec Record
	if json.Unmarshal(line, &rec) != nil || rec.Verdict == "" || rec.Time.IsZero() {
		r.skipped++
		return nil
	}
	if !r.Filter.Match(&rec) {
		return nil
	}
	return fn(&rec, line)
}
