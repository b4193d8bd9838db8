package cniplug

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cnibox/cnibox/internal/conffile/conffiletest"
)

// appendChildEnv makes the re-executed test binary a CNI process that
// appends one record (its stdin, read to its end first) to the log file the
// variable names, as a call's writeLog does.
const appendChildEnv = "CNIPLUG_TEST_APPEND_LOG"

func TestMain(m *testing.M) {
	if path := os.Getenv(appendChildEnv); path != "" {
		rec, err := io.ReadAll(os.Stdin)
		if err != nil {
			os.Exit(2)
		}
		appendRecord(path, rec)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestLogRotationAcrossProcesses: many CNI processes that cross the log's
// size mark at once rotate it once: one backup per crossing, holding the
// full log (not a near-empty file that pushes the real ones out), every
// record of the burst kept once, and the backups pruned to the retention
// (maxLogBackups) before the processes exit.
func TestLogRotationAcrossProcesses(t *testing.T) {
	const procs, rounds = 24, maxLogBackups + 2
	dir := t.TempDir()
	path := filepath.Join(dir, "cnibox.log")
	backupsOf := func() map[string]bool {
		m := map[string]bool{}
		for _, b := range LogBackups(path) {
			m[b] = true
		}
		return m
	}
	for r := 1; r <= rounds; r++ {
		// Fill the live log to just below the mark with this round's filler.
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		st, _ := f.Stat()
		filler := fmt.Sprintf("filler of round %d\n", r)
		n := (maxLogBytes - 100 - st.Size()) / int64(len(filler))
		if _, err := f.Write(bytes.Repeat([]byte(filler), int(n))); err != nil {
			t.Fatal(err)
		}
		full := st.Size() + n*int64(len(filler))
		f.Close()
		before := backupsOf()

		// procs processes, each with a record that crosses the mark, let go
		// at once.
		cmds := make([]*exec.Cmd, procs)
		starts := make([]io.WriteCloser, procs)
		for i := range cmds {
			cmds[i] = exec.Command(os.Args[0], "-test.run=^$")
			cmds[i].Env = append(os.Environ(), appendChildEnv+"="+path)
			if starts[i], err = cmds[i].StdinPipe(); err != nil {
				t.Fatal(err)
			}
			if err := cmds[i].Start(); err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(starts[i], "round %d process %d %s\n", r, i, strings.Repeat("x", 150))
		}
		for _, s := range starts {
			s.Close()
		}
		for i, c := range cmds {
			if err := c.Wait(); err != nil {
				t.Fatalf("round %d process %d: %v", r, i, err)
			}
		}

		var made []string
		for b := range backupsOf() {
			if !before[b] {
				made = append(made, b)
			}
		}
		if len(made) != 1 {
			sizes := ""
			for _, b := range made {
				if st, err := os.Stat(b); err == nil {
					sizes += fmt.Sprintf(" %s:%d", filepath.Base(b), st.Size())
				}
			}
			t.Fatalf("round %d: %d backups made (%s), want one rotation for all %d processes", r, len(made), sizes, procs)
		}
		backup, err := os.ReadFile(made[0])
		if err != nil {
			t.Fatal(err)
		}
		if int64(len(backup)) < full || !bytes.Contains(backup, []byte(filler)) {
			t.Errorf("round %d: backup %s holds %d bytes, want the full log of %d bytes and more", r, made[0], len(backup), full)
		}
		live, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for i := range procs {
			rec := []byte(fmt.Sprintf("round %d process %d ", r, i))
			if n := bytes.Count(backup, rec) + bytes.Count(live, rec); n != 1 {
				t.Errorf("round %d process %d: its record is in the backup and the live log %d times, want once", r, i, n)
			}
		}
		if n := len(backupsOf()); n > maxLogBackups {
			t.Errorf("round %d: %d backups after the processes exited, want at most %d", r, n, maxLogBackups)
		}
	}
	// What is kept is the newest rounds' logs.
	kept := LogBackups(path)
	if len(kept) != maxLogBackups {
		t.Fatalf("kept %v, want %d backups", kept, maxLogBackups)
	}
	for i, b := range kept {
		data, err := os.ReadFile(b)
		if err != nil {
			t.Fatal(err)
		}
		want := fmt.Sprintf("filler of round %d\n", rounds-maxLogBackups+1+i)
		if !bytes.Contains(data, []byte(want)) {
			t.Errorf("backup %d (%s) does not hold %q", i, b, want)
		}
	}
}

// TestLogFileNoFollow: the call log (logFile, the config's word) is
// created with mode 0600 and appended to, and a symlink at its path (to a
// file, or to one not yet there) is never written through.
func TestLogFileNoFollow(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "log", "cnibox.log")
	appendRecord(path, []byte("one\n"))
	appendRecord(path, []byte("two\n"))
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("new log file: %v, %v; want mode 0600", fi, err)
	}
	if b, _ := os.ReadFile(path); string(b) != "one\ntwo\n" {
		t.Errorf("log file holds %q", b)
	}

	conffiletest.NoFollow(t, dir, func(link string) { appendRecord(link, []byte("record\n")) })
}

// TestLogFileFIFO: a FIFO at the log's path (the config's word) neither
// hangs the call nor is written: the record is skipped.
func TestLogFileFIFO(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cnibox.log")
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { appendRecord(path, []byte("record\n")); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("appendRecord blocked on a FIFO at the log's path")
	}
}
