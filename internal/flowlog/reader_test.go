package flowlog

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cnibox/cnibox/internal/logrotate"
)

// collect reads the flow log at path with r (Path set) and returns the
// records' numbers (seqRecord's).
func collect(t *testing.T, r *Reader) []int {
	t.Helper()
	var seqs []int
	err := r.Read(context.Background(), func(rec *Record, line []byte) error {
		if strings.HasSuffix(string(line), "\n") || !strings.HasPrefix(string(line), "{") {
			t.Errorf("line %q: want the record's JSON without its newline", line)
		}
		seqs = append(seqs, int(rec.Src.Port)-1)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return seqs
}

// TestReadSkipsJunk: lines that are no record are counted and passed over;
// the records around them are read.
func TestReadSkipsJunk(t *testing.T) {
	w, path := testWriter(t, Options{})
	w.Write(seqRecord(0))
	f, _ := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	f.WriteString("not json\n{\"node\":\"x\"}\n\n" + strings.Repeat("x", 2*maxLine) + "\n")
	f.Close()
	w.Write(seqRecord(1))
	f, _ = os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	f.WriteString(`{"time":"2026-03-01T12:00:00Z","verdict":"deny"`) // cut short
	f.Close()
	w.Close()
	r := &Reader{Path: path}
	if got := collect(t, r); len(got) != 2 || got[0] != 0 || got[1] != 1 {
		t.Errorf("read %v, want [0 1]", got)
	}
	if r.Skipped() != 4 {
		t.Errorf("skipped %d lines, want 4 (the cut line is not yet a line)", r.Skipped())
	}
}

// TestReadSinceSkipsOldBackups: --since reads from the first backup that
// can hold a record that recent, and the filter does the rest.
func TestReadSinceSkipsOldBackups(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	clk := &fakeClock{t: t0}
	w, path := testWriter(t, Options{MaxSize: 2 << 10, MaxFiles: 100, Rate: -1, Now: clk.Now})
	for i := range 100 {
		clk.Add(time.Second)
		w.Write(seqRecord(i))
	}
	w.Close()
	since := t0.Add(80*time.Second + time.Millisecond) // record 80 on
	// A backup from before since that holds junk: not read.
	old := logrotate.Backups(path)[0]
	if err := os.WriteFile(old, []byte("junk\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	r := &Reader{Path: path, Filter: Filter{Since: since}}
	got := collect(t, r)
	if len(got) != 20 || got[0] != 80 || got[19] != 99 {
		t.Errorf("read %v, want 80..99", got)
	}
	if r.Skipped() != 0 {
		t.Errorf("skipped %d lines: an old backup was read", r.Skipped())
	}
	if got := collect(t, &Reader{Path: path}); len(got) == 0 || got[len(got)-1] != 99 {
		t.Errorf("read %v without since", got)
	}
}

// TestReadNoLog: no file and no backup is an error that wraps
// fs.ErrNotExist and names the path.
func TestReadNoLog(t *testing.T) {
	path := filepath.Join(t.TempDir(), "flows.log")
	err := (&Reader{Path: path}).Read(context.Background(), func(*Record, []byte) error { return nil })
	if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), path) {
		t.Errorf("err %v, want one naming %s that wraps fs.ErrNotExist", err, path)
	}
}

// TestFollowPartialAndTruncate: a follower waits for a line's end, reads
// new records only with FromEnd, and after the file is truncated in place
// (copytruncate) reads it from its start.
func TestFollowPartialAndTruncate(t *testing.T) {
	w, path := testWriter(t, Options{})
	w.Write(seqRecord(0)) // before the follower: not shown (FromEnd)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	got := make(chan int, 10)
	done := make(chan error, 1)
	r := &Reader{Path: path, Poll: time.Millisecond, FromEnd: true}
	go func() {
		done <- r.Follow(ctx, func(rec *Record, _ []byte) error {
			got <- int(rec.Src.Port) - 1
			return nil
		})
	}()
	next := func() int {
		select {
		case s := <-got:
			return s
		case <-time.After(30 * time.Second):
			t.Fatal("no record in 30 s")
			return -1
		}
	}
	time.Sleep(50 * time.Millisecond) // the follower at the end
	line := `{"time":"2026-03-01T12:00:00Z","verdict":"deny","src":{"ip":"10.0.0.1","port":2},"dst":{"ip":"10.0.0.2"}}` + "\n"
	f, _ := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	f.WriteString(line[:40])
	time.Sleep(20 * time.Millisecond)
	f.WriteString(line[40:])
	f.Close()
	if s := next(); s != 1 {
		t.Fatalf("first record %d, want 1", s)
	}
	if err := os.Truncate(path, 0); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	w.Flush(time.Now()) // the writer's size again
	w.Write(seqRecord(2))
	if s := next(); s != 2 {
		t.Fatalf("after the truncation record %d, want 2", s)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Follow: %v", err)
	}
	if r.Skipped() != 0 {
		t.Errorf("skipped %d", r.Skipped())
	}
}
