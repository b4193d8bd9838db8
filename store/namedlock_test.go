package store

import (
	"errors"
	"testing"
)

func TestLockExcludes(t *testing.T) {
	dir := t.TempDir()
	unlock, err := Lock(dir, "firewall")
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(EnvTimeout, "50ms")
	// flock(2) locks belong to the open file: a second open in this
	// process waits as another process would.
	if _, err := Lock(dir, "firewall"); !errors.Is(err, ErrBusy) {
		t.Fatalf("second Lock while held: %v, want ErrBusy", err)
	}
	other, err := Lock(dir, "other")
	if err != nil {
		t.Fatalf("a lock of another name: %v", err)
	}
	other()
	unlock()
	again, err := Lock(dir, "firewall")
	if err != nil {
		t.Fatalf("Lock after unlock: %v", err)
	}
	again()
}
