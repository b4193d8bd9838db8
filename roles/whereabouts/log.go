package whereabouts

import (
	"fmt"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/cnibox/cnibox/cniplug"
)

// logf appends a line to whereabouts' log_file, in whereabouts' format
// ("<time> [<level>] <message>"), when the line's level is at least
// log_level's (debug < verbose < error; whereabouts' default: error). The
// call's JSON record goes to cnibox's log as for every role. A log_file
// that is a symlink is not written (whereabouts follows it).
func (cfg *config) logf(a *cniplug.Args, level, format string, args ...any) {
	if cfg.LogFile == "" || rank(level) < rank(cfg.LogLevel) {
		return
	}
	// O_NOFOLLOW: a symlink at log_file (to /etc/shadow, a cron file) is
	// never written through; a new file is root's alone.
	f, err := os.OpenFile(cfg.LogFile, os.O_APPEND|os.O_CREATE|os.O_WRONLY|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return
	}
	defer f.Close()
	fmt.Fprintf(f, "%s [%s] %s\n", time.Now().UTC().Format(time.RFC3339), level, fmt.Sprintf(format, args...))
}

func rank(level string) int {
	switch strings.ToLower(level) {
	case "debug":
		return 0
	case "verbose":
		return 1
	case "panic":
		return 3
	}
	return 2 // error, and whereabouts' default
}
