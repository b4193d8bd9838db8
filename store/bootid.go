package store

import (
	"os"
	"strings"
	"sync"
)

// bootIDFile is where the kernel publishes the current boot's random UUID.
const bootIDFile = "/proc/sys/kernel/random/boot_id"

var bootID = sync.OnceValue(func() string {
	if id := os.Getenv(EnvBootID); id != "" {
		return id // tests only: see EnvBootID
	}
	b, err := os.ReadFile(bootIDFile)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
})

// BootID returns the kernel's boot ID ("" if unreadable), read once per
// process. Records carry it so that state from before a reboot is recognisable.
func BootID() string { return bootID() }
