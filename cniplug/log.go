package cniplug

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"gopkg.in/natefinch/lumberjack.v2"
)

// DefaultLogFile is where every invocation's record goes unless the config's
// logFile or $CNIBOX_LOG_FILE says otherwise ("off" disables logging).
const DefaultLogFile = "/var/log/cnibox/cnibox.log"

// Step is one timed step of an invocation, for the log record.
type Step struct {
	Name string
	Took time.Duration
}

// Mark records that the step name ended now; its duration counts from the
// previous mark (or the start of the call).
func (a *Args) Mark(name string) {
	if a == nil || a.log == nil {
		return
	}
	now := time.Now()
	a.log.steps = append(a.log.steps, Step{Name: name, Took: now.Sub(a.log.last)})
	a.log.last = now
}

// callLog collects what the invocation's log record says.
type callLog struct {
	start, last time.Time
	steps       []Step
}

// logSettings are the config's logging fields.
type logSettings struct {
	LogFile  string `json:"logFile"`
	LogLevel string `json:"logLevel"`
}

// mayHaveLogSettings reports whether the config can hold logFile or
// logLevel: both keys contain "log" (encoding/json matches keys without
// regard to case), and a key written with escapes contains a backslash. Most
// configs have neither, and every call is spared a second reflective parse
// of its whole config (prevResult included).
func mayHaveLogSettings(stdin []byte) bool {
	return bytes.Contains(bytes.ToLower(stdin), []byte("log")) || bytes.IndexByte(stdin, '\\') >= 0
}

func levelOf(s string) (slog.Level, bool) {
	switch strings.ToLower(s) {
	case "", "info":
		return slog.LevelInfo, true
	case "debug", "verbose": // verbose: Multus' level between debug and error
		return slog.LevelDebug, true
	case "warn", "warning":
		return slog.LevelWarn, true
	case "error", "panic": // panic: Multus' least verbose level
		return slog.LevelError, true
	}
	return 0, false
}

// writeLog appends one JSON record for the call to the log file. Logging never
// fails a call: a file that cannot be written is skipped.
func writeLog(role *Role, inv Invocation, stdin []byte, a *Args, out []byte, err error, start time.Time) {
	var ls logSettings
	if mayHaveLogSettings(stdin) {
		_ = json.Unmarshal(stdin, &ls)
	}
	path := ls.LogFile
	if path == "" {
		path = inv.Getenv("CNIBOX_LOG_FILE")
	}
	if path == "" {
		path = DefaultLogFile
	}
	if path == "off" || path == "none" {
		return
	}
	min, ok := levelOf(ls.LogLevel)
	if !ok {
		min = slog.LevelInfo
	}
	level := slog.LevelInfo
	if inv.Getenv("CNI_COMMAND") == "VERSION" {
		level = slog.LevelDebug // runtimes ask on every config load
	}
	if err != nil {
		level = slog.LevelError
	}
	if level < min {
		return
	}
	var buf bytes.Buffer
	logger := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: min, ReplaceAttr: utcTime}))
	attrs := []slog.Attr{
		slog.String("role", role.Name),
		slog.String("command", inv.Getenv("CNI_COMMAND")),
		slog.String("container", inv.Getenv("CNI_CONTAINERID")),
		slog.String("ifname", inv.Getenv("CNI_IFNAME")),
		slog.String("netns", inv.Getenv("CNI_NETNS")),
		slog.Int("pid", os.Getpid()),
		slog.Duration("took", time.Since(start)),
	}
	if a != nil && a.Conf != nil {
		attrs = append(attrs, slog.String("network", a.Conf.Name), slog.String("cniVersion", a.Conf.CNIVersion))
		if pod := a.CNIArgs.Pod(); pod != "" {
			attrs = append(attrs, slog.String("pod", pod))
		}
	}
	if a != nil && a.log != nil && len(a.log.steps) > 0 {
		steps := make([]any, 0, len(a.log.steps))
		for _, s := range a.log.steps {
			steps = append(steps, slog.Duration(s.Name, s.Took))
		}
		attrs = append(attrs, slog.Group("steps", steps...))
	}
	msg := "ok"
	if err != nil {
		te := AsTypesError(err)
		msg = "error"
		attrs = append(attrs, slog.Int("code", int(te.Code)), slog.String("error", te.Msg))
		if stack := panicStack(err); stack != "" {
			attrs = append(attrs, slog.String("stack", stack))
		}
	} else if len(out) > 0 && inv.Getenv("CNI_COMMAND") == "ADD" {
		attrs = append(attrs, slog.Any("result", json.RawMessage(compact(out))))
	}
	logger.LogAttrs(context.Background(), level, msg, attrs...)
	appendRecord(path, buf.Bytes())
}

// maxLogBytes is the size at which the log file is rotated (lumberjack's
// MaxSize, in MiB, is derived from it).
const maxLogBytes = 10 << 20

// appendRecord appends one record to the log file at path. The common case,
// an existing file with room left, is one open(O_APPEND) and one write; a
// missing file is created (mode 0600); a full one goes through lumberjack,
// which rotates it (keeping 3 backups). lumberjack is not used for every
// record because each of its opens starts a goroutine that lists the log
// directory. The path is the config's word (logFile): anything at it but a
// regular file (a symlink to /etc/shadow or to a cron file not yet there)
// is left alone, and no open follows a symlink.
func appendRecord(path string, rec []byte) {
	st, err := os.Lstat(path)
	switch {
	case err == nil && !st.Mode().IsRegular():
		return
	case err == nil && st.Size()+int64(len(rec)) < maxLogBytes:
		_ = writeRecord(path, os.O_APPEND|os.O_WRONLY, rec)
		return
	case err != nil:
		if os.MkdirAll(filepath.Dir(path), 0o700) != nil {
			return
		}
		if err := writeRecord(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, rec); errors.Is(err, fs.ErrExist) {
			_ = writeRecord(path, os.O_APPEND|os.O_WRONLY, rec) // another call made it meanwhile
		}
		return
	}
	w := &lumberjack.Logger{Filename: path, MaxSize: maxLogBytes >> 20, MaxBackups: 3}
	_, _ = w.Write(rec)
	_ = w.Close()
}

// writeRecord opens path with flag, never through a symlink, and writes
// rec; it returns the open's error.
func writeRecord(path string, flag int, rec []byte) error {
	f, err := os.OpenFile(path, flag|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	_, _ = f.Write(rec)
	return f.Close()
}

// utcTime writes the record's time in UTC (no time zone file is read).
func utcTime(groups []string, a slog.Attr) slog.Attr {
	if len(groups) == 0 && a.Key == slog.TimeKey && a.Value.Kind() == slog.KindTime {
		a.Value = slog.TimeValue(a.Value.Time().UTC())
	}
	return a
}

// compact returns b, a JSON document, without insignificant white space.
func compact(b []byte) []byte {
	var out bytes.Buffer
	if json.Compact(&out, b) != nil {
		return []byte(`null`)
	}
	return out.Bytes()
}
