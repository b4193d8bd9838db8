package flowlog

import (
	"bufio"
	"context"
	"encoding/json"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cnibox/cnibox/internal/logrotate"
)

// fakeClock is a Writer's clock that moves only when the test moves it.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Add(d time.Duration) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
	return c.t
}

// seqRecord is record number seq (its source port, seq+1) of a test.
func seqRecord(seq int) Record {
	return Record{
		Node: "node-1", Verdict: Deny, Direction: Ingress, Proto: "TCP",
		Src:    Endpoint{IP: netip.MustParseAddr("10.88.1.5"), Port: uint16(seq + 1), Namespace: "shop", Pod: "web-0"},
		Dst:    Endpoint{IP: netip.MustParseAddr("10.88.2.7"), Port: 5432, Namespace: "shop", Pod: "db-0"},
		Policy: &Policy{Kind: KindNetworkPolicy, Namespace: "shop", Rule: RuleIsolation, Isolating: []string{"db-only"}},
	}
}

// readLines decodes every line of the files, in order.
func readLines(t *testing.T, files ...string) []Record {
	t.Helper()
	var out []Record
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(fh)
		for sc.Scan() {
			var r Record
			if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
				t.Fatalf("%s: %v: %q", f, err, sc.Text())
			}
			out = append(out, r)
		}
		fh.Close()
	}
	return out
}

// TestFollowAcrossRotations: a follower started before the file is rotated
// many times sees every record exactly once, in order; so does one that
// stalls while the rotations happen and has to walk the backups after.
func TestFollowAcrossRotations(t *testing.T) {
	const n = 3000
	w, path := testWriter(t, Options{MaxSize: 16 << 10, MaxFiles: 1000, Rate: -1})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	type follower struct {
		mu    sync.Mutex
		seqs  []int
		first chan struct{} // closed at record 0
		done  chan struct{} // closed at record n-1
		err   chan error
	}
	release := make(chan struct{}) // lets the stalled follower go on
	start := func(stall bool) *follower {
		f := &follower{first: make(chan struct{}), done: make(chan struct{}), err: make(chan error, 1)}
		r := &Reader{Path: path, Poll: time.Millisecond}
		go func() {
			f.err <- r.Follow(ctx, func(rec *Record, _ []byte) error {
				seq := int(rec.Src.Port) - 1
				f.mu.Lock()
				f.seqs = append(f.seqs, seq)
				f.mu.Unlock()
				if seq == 0 {
					close(f.first)
					if stall {
						<-release
					}
				}
				if seq == n-1 {
					close(f.done)
				}
				return nil
			})
		}()
		return f
	}
	fast, slow := start(false), start(true)
	if err := w.Write(seqRecord(0)); err != nil {
		t.Fatal(err)
	}
	for _, f := range []*follower{fast, slow} {
		select {
		case <-f.first:
		case <-time.After(30 * time.Second):
			t.Fatal("a follower did not see the first record in 30 s")
		}
	}
	for i := 1; i < n; i++ {
		if err := w.Write(seqRecord(i)); err != nil {
			t.Fatal(err)
		}
		if i%50 == 0 {
			time.Sleep(time.Millisecond) // let the fast one catch up now and then
		}
	}
	if b := logrotate.Backups(path); len(b) < 20 {
		t.Fatalf("%d rotations, want 20 or more for the test to mean anything", len(b))
	}
	close(release)
	for name, f := range map[string]*follower{"follower": fast, "stalled follower": slow} {
		select {
		case <-f.done:
		case err := <-f.err:
			t.Fatalf("%s ended: %v", name, err)
		case <-time.After(60 * time.Second):
			f.mu.Lock()
			t.Fatalf("%s: %d records after 60 s, want %d", name, len(f.seqs), n)
		}
	}
	cancel()
	for name, f := range map[string]*follower{"follower": fast, "stalled follower": slow} {
		if err := <-f.err; err != nil {
			t.Errorf("%s: %v", name, err)
		}
		if len(f.seqs) != n {
			t.Errorf("%s saw %d records, want %d", name, len(f.seqs), n)
		}
		for i, s := range f.seqs {
			if s != i {
				t.Errorf("%s: record %d is number %d", name, i, s)
				break
			}
		}
	}
}

// TestMaxFiles: rotation keeps the newest MaxFiles backups, no file
// passes MaxSize, and what is kept is the log's tail, whole.
func TestMaxFiles(t *testing.T) {
	const n, maxSize = 200, 2 << 10
	clk := &fakeClock{t: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	w, path := testWriter(t, Options{MaxSize: maxSize, MaxFiles: 2, Rate: -1, Now: clk.Now})
	for i := range n {
		clk.Add(time.Millisecond)
		if err := w.Write(seqRecord(i)); err != nil {
			t.Fatal(err)
		}
	}
	w.Close()
	backups := logrotate.Backups(path)
	if len(backups) != 2 {
		t.Fatalf("backups %v, want 2", backups)
	}
	files := append(backups, path)
	for _, f := range files {
		if st, err := os.Stat(f); err != nil || st.Size() > maxSize {
			t.Errorf("%s: %v, %v bytes, want at most %d", f, err, st.Size(), maxSize)
		}
	}
	recs := readLines(t, files...)
	if len(recs) == 0 || len(recs) >= n/2 {
		t.Fatalf("%d records kept of %d", len(recs), n)
	}
	for i, r := range recs {
		if want := n - len(recs) + i; int(r.Src.Port)-1 != want {
			t.Fatalf("kept record %d is number %d, want %d (the tail in order)", i, r.Src.Port-1, want)
		}
	}
}

// TestFileModes: the file is made 0640 in a directory made 0750.
func TestFileModes(t *testing.T) {
	old := syscall.Umask(0o022)
	defer syscall.Umask(old)
	path := filepath.Join(t.TempDir(), "log", "cnibox", "flows.log")
	w, err := NewWriter(Options{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if st, err := os.Stat(path); err != nil || st.Mode().Perm() != 0o640 {
		t.Errorf("file: %v, %v; want mode 0640", st.Mode(), err)
	}
	if st, err := os.Stat(filepath.Dir(path)); err != nil || st.Mode().Perm() != 0o750 {
		t.Errorf("directory: %v, %v; want mode 0750", st.Mode(), err)
	}
}

// TestFlushReopens: a file removed (or rotated by another hand) under the
// Writer is replaced at the next Flush, not written on unseen.
func TestFlushReopens(t *testing.T) {
	w, path := testWriter(t, Options{})
	if err := w.Write(seqRecord(0)); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := w.Write(seqRecord(1)); err != nil {
		t.Fatal(err)
	}
	if recs := readLines(t, path); len(recs) != 1 || recs[0].Src.Port != 2 {
		t.Errorf("after the removal the file holds %+v, want record 1", recs)
	}
}

// TestConcurrentWrites: writers in many goroutines, across rotations, leave
// whole lines, every record once.
func TestConcurrentWrites(t *testing.T) {
	const goroutines, each = 8, 250
	w, path := testWriter(t, Options{MaxSize: 32 << 10, MaxFiles: 100, Rate: -1})
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range each {
				if err := w.Write(seqRecord(g*each + i)); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	w.Close()
	seen := map[uint16]int{}
	for _, r := range readLines(t, append(logrotate.Backups(path), path)...) {
		seen[r.Src.Port]++
	}
	for i := range goroutines * each {
		if seen[uint16(i+1)] != 1 {
			t.Errorf("record %d written %d times", i, seen[uint16(i+1)])
		}
	}
	if err := w.Write(seqRecord(0)); err != ErrClosed {
		t.Errorf("Write after Close: %v, want ErrClosed", err)
	}
}

// testWriter is a Writer of o on a new file in a temporary directory,
// closed when the test ends, and its path.
func testWriter(t *testing.T, o Options) (*Writer, string) {
	t.Helper()
	o.Path = filepath.Join(t.TempDir(), "flows.log")
	w, err := NewWriter(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	return w, o.Path
}
