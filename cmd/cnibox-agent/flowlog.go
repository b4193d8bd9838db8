//go:build !nokube

package main

import (
	"log/slog"
	"sync"
	"time"

	"github.com/cnibox/cnibox/internal/flowlog"
)

// lazyFlowLog is the flow log's Writer, opened on the first record: a node
// where no namespace asks for the flow log (and --flow-log is off) has no
// file. A file that cannot be opened is tried again at most every
// reopenEvery; meanwhile records are lost with the error.
type lazyFlowLog struct {
	o   flowlog.Options
	log *slog.Logger

	mu      sync.Mutex
	w       *flowlog.Writer
	err     error
	tried   time.Time
	stopped bool
}

const reopenEvery = 10 * time.Second

func (l *lazyFlowLog) writer() (*flowlog.Writer, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.stopped:
		return nil, flowlog.ErrClosed
	case l.w != nil:
		return l.w, nil
	case l.err != nil && time.Since(l.tried) < reopenEvery:
		return nil, l.err
	}
	l.tried = time.Now()
	l.w, l.err = flowlog.NewWriter(l.o)
	if l.log != nil {
		if l.err != nil {
			l.log.Warn("flow log: cannot open its file; records are lost until it can", "file", l.o.Path, "err", l.err)
		} else {
			l.log.Info("flow log: writing", "file", l.o.Path)
		}
	}
	return l.w, l.err
}

// Write writes r to the flow log, opening it first if need be.
func (l *lazyFlowLog) Write(r flowlog.Record) error {
	w, err := l.writer()
	if err != nil {
		return err
	}
	return w.Write(r)
}

// Flush flushes the flow log if it is open.
func (l *lazyFlowLog) Flush(now time.Time) error {
	l.mu.Lock()
	w := l.w
	l.mu.Unlock()
	if w == nil {
		return nil
	}
	return w.Flush(now)
}

// Close closes the flow log if it is open; later records are refused.
func (l *lazyFlowLog) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.stopped = true
	if l.w == nil {
		return nil
	}
	return l.w.Close()
}
