package flowlog

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/cnibox/cnibox/internal/logrotate"
)

// The defaults of Options (docs/flowlog.md).
const (
	DefaultPath     = "/var/log/cnibox/flows.log"
	DefaultMaxSize  = 50 << 20 // bytes
	DefaultMaxFiles = 5
	DefaultRate     = 1000 // records a second
	DefaultBurst    = 5000
)

// Options configures a Writer; a zero field takes its default.
type Options struct {
	// Path is the live file (DefaultPath); its directory is made 0750, the
	// file 0640.
	Path string
	// Node names the node in the suppressed records the Writer writes.
	Node string
	// MaxSize is the size in bytes the live file does not pass: a line that
	// would take it past is written to a new file, the old one renamed to
	// a backup (DefaultMaxSize).
	MaxSize int64
	// MaxFiles is how many backups are kept (DefaultMaxFiles).
	MaxFiles int
	// Rate is how many records a second are written, Burst how many at
	// once; past them a record is counted in the next suppressed record,
	// not kept. A negative Rate is no limit. One source address has a
	// tenth of them, one source namespace a quarter (fair.go).
	Rate  float64
	Burst int
	// Now is the clock of the rate limit and of the suppressed records
	// (time.Now).
	Now func() time.Time
}

// withDefaults is o with every zero (or negative) field set to its
// default; Rate alone keeps a negative value (no limit).
func (o Options) withDefaults() Options {
	o.Path = cmp.Or(o.Path, DefaultPath)
	o.MaxSize = cmp.Or(max(o.MaxSize, 0), DefaultMaxSize)
	o.MaxFiles = cmp.Or(max(o.MaxFiles, 0), DefaultMaxFiles)
	o.Rate = cmp.Or(o.Rate, DefaultRate)
	o.Burst = cmp.Or(max(o.Burst, 0), DefaultBurst)
	if o.Now == nil {
		o.Now = time.Now
	}
	return o
}

// Writer appends records to the flow log. It is safe for concurrent use.
// It has no goroutine of its own: the summary of dropped records is
// written by the first Write at least SummaryInterval after the first drop,
// or by Flush, which the agent calls from a ticker so that a flood that
// stops is summed up too.
type Writer struct {
	o Options

	mu     sync.Mutex
	f      *os.File // nil after a failed write or open: reopened by the next
	size   int64    // of f, as written through it
	buf    bytes.Buffer
	limit  fair
	drops  tally
	closed bool
}

// ErrClosed is returned by Write and Flush after Close.
const ErrClosed = closedError("flow log closed")

// closedError is ErrClosed's type: a constant, so that no error value is
// made when the binary starts.
type closedError string

func (e closedError) Error() string { return string(e) }

// NewWriter opens (or creates) the flow log for appending.
func NewWriter(o Options) (*Writer, error) {
	w := &Writer{o: o.withDefaults()}
	w.limit = newFair(w.o.Rate, float64(w.o.Burst))
	if err := w.open(); err != nil {
		return nil, err
	}
	return w, nil
}

// Write logs rec, or counts it toward the next suppressed record when it is
// over the rate. A zero Time is the Writer's clock's now. The error is the
// file's (the record is lost); the next Write opens the file again.
func (w *Writer) Write(rec Record) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return ErrClosed
	}
	now := w.o.Now()
	if err := w.summarize(now, false); err != nil {
		return err
	}
	if w.o.Rate > 0 && !w.limit.take(rec.Src, now) {
		w.drops.add(rec.Src, rec.Dst.IP, now)
		return nil
	}
	if rec.Time.IsZero() {
		rec.Time = now
	}
	return w.write(&rec)
}

// Flush writes the suppressed record when one is due at now (a drop
// SummaryInterval old), and opens the file again when it is no longer the
// one at the path (removed or rotated by another hand). Call it from a
// ticker, once a second.
func (w *Writer) Flush(now time.Time) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return ErrClosed
	}
	if w.f != nil {
		fst, err := w.f.Stat()
		st, lerr := os.Lstat(w.o.Path)
		if err != nil || lerr != nil || !os.SameFile(fst, st) {
			w.f.Close()
			w.f = nil
		} else {
			w.size = fst.Size()
		}
	}
	return w.summarize(now, false)
}

// Close writes the summary of what was dropped, if anything, and closes the
// file.
func (w *Writer) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return nil
	}
	err := w.summarize(w.o.Now(), true)
	w.closed = true
	if w.f != nil {
		err = errors.Join(err, w.f.Close())
		w.f = nil
	}
	return err
}

// summarize writes the suppressed record when one is due at now, or with
// force when anything was dropped at all.
func (w *Writer) summarize(now time.Time, force bool) error {
	if !w.drops.due(now) && !(force && w.drops.count > 0) {
		return nil
	}
	return w.write(&Record{Time: now, Node: w.o.Node, Verdict: Suppressed, Suppressed: w.drops.summary()})
}

// write appends rec as one line, rotating the file first when the line
// would take it past MaxSize. w.mu is held.
func (w *Writer) write(rec *Record) error {
	rec.Time = rec.Time.UTC()
	if s := rec.Suppressed; s != nil && s.Since.Location() != time.UTC {
		utc := *s
		utc.Since = s.Since.UTC()
		rec.Suppressed = &utc
	}
	w.buf.Reset()
	enc := json.NewEncoder(&w.buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(rec); err != nil {
		return fmt.Errorf("flow record: %w", err)
	}
	if w.f == nil {
		if err := w.open(); err != nil {
			return err
		}
	}
	if w.size > 0 && w.size+int64(w.buf.Len()) > w.o.MaxSize {
		if err := w.rotate(); err != nil {
			return err
		}
	}
	n, err := w.f.Write(w.buf.Bytes())
	w.size += int64(n)
	if err != nil {
		w.f.Close()
		w.f = nil
		return fmt.Errorf("write flow log: %w", err)
	}
	return nil
}

// rotate renames the live file to a backup, pruning the backups to
// MaxFiles, and opens a new one. Every line written to the old file is in
// it before the rename: a follower that sees the new file has read the old
// one to its end.
func (w *Writer) rotate() error {
	w.f.Close()
	w.f = nil
	if err := logrotate.Rotate(w.o.Path, w.o.Now(), w.o.MaxFiles); err != nil {
		return err
	}
	return w.open()
}

// open opens the live file for appending. w.mu is held (or w is new).
func (w *Writer) open() error {
	f, err := logrotate.Open(w.o.Path, 0o640, 0o750)
	if err != nil {
		return fmt.Errorf("open flow log: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return fmt.Errorf("open flow log: %w", err)
	}
	w.f, w.size = f, st.Size()
	return nil
}
