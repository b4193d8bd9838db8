package store

import (
	"os"
	"strings"
	"sync"
)

// bootIDFile is where the kernel publishes the current boot's random UUID.
const bootIDFile = "/proc/sys/kernel/random/boot_id"

// bootID is the boot ID once read. (A sync.Once, not sync.OnceValue: a
// package-level OnceValue is built by code at every start.)
var bootID struct {
	once sync.Once
	id   string
}

// BootID returns the kernel's boot ID ("" if unreadable), read once per
// process. Records carry it so that state from before a reboot is recognisable.
func BootID() string {
	bootID.once.Do(func() {
		if id := os.Getenv(EnvBootID); id != "" {
			bootID.id = id // tests only: see EnvBootID
			return
		}
		if b, err := os.ReadFile(bootIDFile); err == nil {
			bootID.id = strings.TrimSpace(string(b))
		}
	})
	return bootID.id
}
