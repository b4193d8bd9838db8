package logrotate

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestRotateOrder: backups list oldest first, even when the clock went back
// between rotations or stood still; only keep of them are kept; files
// beside the log that are not its backups are neither listed nor removed.
func TestRotateOrder(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "flows.log")
	other := filepath.Join(dir, "flows-dhcp.log")
	if err := os.WriteFile(other, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	times := []time.Time{t0, t0.Add(-time.Hour), t0.Add(-time.Hour), t0.Add(time.Second), t0}
	for i, at := range times {
		f, err := Open(path, 0o640, 0o750)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(f, "file %d\n", i)
		f.Close()
		if err := Rotate(path, at, 3); err != nil {
			t.Fatal(err)
		}
	}
	backups := Backups(path)
	if len(backups) != 3 {
		t.Fatalf("backups %v, want 3", backups)
	}
	for i, b := range backups {
		data, _ := os.ReadFile(b)
		if want := fmt.Sprintf("file %d\n", len(times)-3+i); string(data) != want {
			t.Errorf("backup %d (%s) holds %q, want %q", i, filepath.Base(b), data, want)
		}
	}
	if _, err := os.Stat(other); err != nil {
		t.Errorf("another log beside it: %v", err)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("the live file after a rotation: %v, want none until the writer opens one", err)
	}
}
