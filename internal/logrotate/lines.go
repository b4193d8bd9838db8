package logrotate

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"
)

const (
	// DefaultPoll is how often a follower at the live file's end looks for
	// new lines and for a rotation.
	DefaultPoll = 250 * time.Millisecond
	// DefaultMaxLine bounds a line; a longer one is skipped.
	DefaultMaxLine = 1 << 20
)

// Lines reads the lines of a log this package rotates: the backups oldest
// first, then the live file, and with Follow what is written after, across
// rotations and truncations, as tail -F does (a rotation renames, so no
// line is read twice or lost: the old file is read to its end, then the
// next). The call log (`cnibox logs`) and the flow log (`cnibox flows`)
// read through it.
type Lines struct {
	// Path is the live file.
	Path string
	// Since passes over the backups rotated before it (every line of them
	// is older).
	Since time.Time
	// FromEnd starts at the live file's end: Follow shows new lines only.
	FromEnd bool
	// Poll is Follow's wait at the live file's end (DefaultPoll).
	Poll time.Duration
	// MaxLine bounds a line (DefaultMaxLine): a longer one is skipped.
	MaxLine int

	skipped int
}

// Skipped is how many lines were passed over: longer than MaxLine, or the
// last line of a file cut short (no newline before the file was rotated).
func (l *Lines) Skipped() int { return l.skipped }

func (l *Lines) maxLine() int {
	if l.MaxLine > 0 {
		return l.MaxLine
	}
	return DefaultMaxLine
}

// Read calls fn with each line (its newline left out, valid during the
// call) until the end of the live file or an error of fn's. No file at
// Path and no backup is an error that wraps fs.ErrNotExist.
func (l *Lines) Read(ctx context.Context, fn func(line []byte) error) error {
	return l.run(ctx, false, fn)
}

// Follow is Read that, at the live file's end, waits for more, and goes on
// across rotations (to the next backup when it fell behind, then the new
// live file) and a truncation (the file read again from its start), until
// ctx ends; then it returns nil.
func (l *Lines) Follow(ctx context.Context, fn func(line []byte) error) error {
	return l.run(ctx, true, fn)
}

func (l *Lines) run(ctx context.Context, follow bool, fn func([]byte) error) error {
	poll := l.Poll
	if poll <= 0 {
		poll = DefaultPoll
	}
	c, err := l.start()
	if err != nil {
		return err
	}
	defer func() { c.f.Close() }()
	for {
		if err := ctx.Err(); err != nil {
			if follow {
				return nil
			}
			return err
		}
		line, err := c.line()
		if err == nil {
			if n := len(line); n > 0 && line[n-1] == '\n' {
				line = line[:n-1]
			}
			if err := fn(line); err != nil {
				return err
			}
			continue
		}
		if !errors.Is(err, io.EOF) {
			return fmt.Errorf("read %s: %w", c.path, err)
		}
		moved, err := c.advance()
		if err != nil {
			return err
		}
		if moved {
			continue
		}
		if !follow {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(poll):
		}
	}
}

// start opens the first file to read: the oldest backup that can hold a
// line at or after Since, else the live file (at its end with FromEnd).
func (l *Lines) start() (*cursor, error) {
	c := &cursor{path: l.Path, lines: l}
	if !l.FromEnd {
		for _, b := range Backups(l.Path) {
			if t, ok := BackupTime(l.Path, b); ok && t.Before(l.Since) {
				continue // rotated before Since: every line in it is older
			}
			if f, err := os.Open(b); err == nil {
				c.set(f, 0)
				return c, nil
			}
		}
	}
	f, err := os.Open(l.Path)
	if err != nil {
		return nil, err // it names the path; fs.ErrNotExist for none
	}
	var off int64
	if l.FromEnd {
		if off, err = f.Seek(0, io.SeekEnd); err != nil {
			f.Close()
			return nil, fmt.Errorf("read %s: %w", l.Path, err)
		}
	}
	c.set(f, off)
	return c, nil
}

// cursor is the place Lines reads at: a file, backup or live, and the
// offset in it.
type cursor struct {
	path    string
	lines   *Lines // counts the lines skipped
	f       *os.File
	rd      *bufio.Reader
	off     int64  // bytes of f consumed
	partial []byte // a line read up to the file's end, its newline not yet written
	long    bool   // in a line longer than maxLine, passing it over
	rotated bool   // f is no longer the live file: one more read to its end, then on
}

// set makes f, at offset off, the file read.
func (c *cursor) set(f *os.File, off int64) {
	if c.f != nil && c.f != f {
		c.f.Close()
	}
	if len(c.partial) > 0 || c.long {
		c.lines.skipped++ // the last line of a file, cut short
	}
	c.f, c.off, c.partial, c.long, c.rotated = f, off, c.partial[:0], false, false
	if c.rd == nil {
		c.rd = bufio.NewReaderSize(f, 64<<10)
	} else {
		c.rd.Reset(f)
	}
}

// line is the next whole line of the file, its newline included, valid
// until the next call; io.EOF at the file's end for now (a partial line
// is kept for when its end is written).
func (c *cursor) line() ([]byte, error) {
	for {
		chunk, err := c.rd.ReadSlice('\n')
		c.off += int64(len(chunk))
		switch {
		case err == nil && c.long:
			c.long = false
			c.lines.skipped++
		case err == nil && len(c.partial) > 0:
			line := append(c.partial, chunk...)
			c.partial = line[:0]
			return line, nil
		case err == nil:
			return chunk, nil
		case errors.Is(err, bufio.ErrBufferFull) || errors.Is(err, io.EOF):
			if !c.long && len(c.partial)+len(chunk) > c.lines.maxLine() {
				c.long, c.partial = true, c.partial[:0]
			}
			if !c.long {
				c.partial = append(c.partial, chunk...)
			}
			if errors.Is(err, io.EOF) {
				return nil, io.EOF
			}
		default:
			return nil, err
		}
	}
}

// advance is called at the end of the file read. When that file is still
// the live one it reports false (nothing more for now), after moving back
// to the start of a file that was truncated. When it was rotated away (or
// removed), it is read to its end once more (lines written before the
// rotation), then the cursor moves to the file written after it: the next
// backup when the reader fell behind, else the new live file (not there
// yet, in the moment between the writer's rename and its create: false).
func (c *cursor) advance() (bool, error) {
	fst, err := c.f.Stat()
	if err != nil {
		return false, fmt.Errorf("read %s: %w", c.path, err)
	}
	st, err := os.Stat(c.path)
	if err == nil && os.SameFile(fst, st) {
		if st.Size() >= c.off {
			return false, nil
		}
		if _, err := c.f.Seek(0, io.SeekStart); err != nil {
			return false, fmt.Errorf("read %s: %w", c.path, err)
		}
		c.set(c.f, 0) // truncated in place: from its start
		return true, nil
	}
	if !c.rotated {
		c.rotated = true
		return true, nil
	}
	for {
		if next, ok := backupAfter(c.path, fst); ok {
			f, err := os.Open(next)
			if errors.Is(err, os.ErrNotExist) {
				continue // pruned meanwhile: look again
			}
			if err != nil {
				return false, fmt.Errorf("read %s: %w", c.path, err)
			}
			c.set(f, 0)
			return true, nil
		}
		f, err := os.Open(c.path)
		if errors.Is(err, os.ErrNotExist) {
			return false, nil
		}
		if err != nil {
			return false, fmt.Errorf("read %s: %w", c.path, err)
		}
		// A rotation between the look at the backups and the open: the
		// file opened may be one too far.
		if next, ok := backupAfter(c.path, fst); ok {
			nst, err1 := os.Stat(next)
			st, err2 := f.Stat()
			if err1 != nil || err2 != nil || !os.SameFile(nst, st) {
				f.Close()
				continue
			}
		}
		c.set(f, 0)
		return true, nil
	}
}

// backupAfter is the backup of path rotated right after the file fst, if
// fst is a backup and not the newest.
func backupAfter(path string, fst os.FileInfo) (string, bool) {
	backups := Backups(path)
	for i, b := range backups {
		if st, err := os.Stat(b); err == nil && os.SameFile(fst, st) {
			if i+1 < len(backups) {
				return backups[i+1], true
			}
			break
		}
	}
	return "", false
}
