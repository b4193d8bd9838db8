package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/cnibox/cnibox/test/internal/upstream"
)

// refPlugins are the reference plugins the bench needs.
var refPlugins = []string{"bridge", "host-local"}

// prepareRef returns the reference plugin directory and a name for it:
// Debian's package (installed with apt-get when missing), upstream's release
// built once into the user's cache (test/internal/upstream), or a directory given by the user.
func prepareRef(ref string) (dir, name string, err error) {
	switch ref {
	case "", "debian":
		if !hasPlugins(debianRefDir) {
			fmt.Fprintln(os.Stderr, "bench: installing containernetworking-plugins (apt-get)")
			cmd := exec.Command("apt-get", "install", "-y", "-qq", "--no-install-recommends", "containernetworking-plugins")
			cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
			cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
			if err := cmd.Run(); err != nil {
				return "", "", fmt.Errorf("apt-get install containernetworking-plugins: %w", err)
			}
		}
		return debianRefDir, "debian " + debVersion("containernetworking-plugins"), nil
	case "upstream":
		dir, err := upstream.Plugins()
		return dir, "upstream " + upstream.Version, err
	default:
		if !hasPlugins(ref) {
			return "", "", fmt.Errorf("REF=%s: not a plugin directory with %s", ref, strings.Join(refPlugins, ", "))
		}
		abs, err := filepath.Abs(ref)
		return abs, abs, err
	}
}

func hasPlugins(dir string) bool {
	for _, p := range refPlugins {
		if st, err := os.Stat(filepath.Join(dir, p)); err != nil || st.IsDir() {
			return false
		}
	}
	return true
}

func debVersion(pkg string) string {
	out, err := exec.Command("dpkg-query", "-W", "-f=${Version}", pkg).Output()
	if err != nil {
		return "(version unknown)"
	}
	return strings.TrimSpace(string(out))
}

// helpers are small static Go binaries the bench builds for its floor rows.
type helpers struct {
	nop     string // does nothing: the floor of exec'ing any Go plugin
	rsswrap string // runs its arguments and reports that child's peak RSS
	vethdel string // deletes one link (RTM_DELLINK), optionally in a namespace: the floor of any DEL
	nopcni  string // a CNI plugin that does nothing: the floor of a chain
}

// buildHelpers builds the helpers (standard library only). rsswrap is needed
// because Go starts children with vfork semantics: an exec'd child's maxrss
// starts at its parent's own peak RSS, so the bench (tens of MiB) cannot
// measure a plugin directly; the wrapper's own floor (a few MiB) is reported
// with the numbers.
func buildHelpers(dir string) (helpers, error) {
	srcs := map[string]string{
		"nop":     "package main\n\nfunc main() {}\n",
		"rsswrap": rsswrapSrc,
		"vethdel": vethdelSrc,
		"nopcni":  nopcniSrc,
	}
	out := map[string]string{}
	for name, src := range srcs {
		d := filepath.Join(dir, name+"-src")
		if err := os.MkdirAll(d, 0o755); err != nil {
			return helpers{}, err
		}
		if err := os.WriteFile(filepath.Join(d, "main.go"), []byte(src), 0o644); err != nil {
			return helpers{}, err
		}
		if err := os.WriteFile(filepath.Join(d, "go.mod"), []byte("module "+name+"\n\ngo 1.21\n"), 0o644); err != nil {
			return helpers{}, err
		}
		out[name] = filepath.Join(dir, name)
		cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", out[name], ".")
		cmd.Dir = d
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=")
		if b, err := cmd.CombinedOutput(); err != nil {
			return helpers{}, fmt.Errorf("build %s: %w: %s", name, err, b)
		}
	}
	return helpers{nop: out["nop"], rsswrap: out["rsswrap"], vethdel: out["vethdel"], nopcni: out["nopcni"]}, nil
}

// nopcniSrc is a CNI plugin that does nothing: ADD passes prevResult on (or
// returns an empty result), DEL and CHECK succeed. It decodes its config with
// encoding/json as any Go plugin must.
const nopcniSrc = `package main

import (
	"encoding/json"
	"io"
	"os"
)

func main() {
	in, _ := io.ReadAll(os.Stdin)
	var c map[string]json.RawMessage
	if err := json.Unmarshal(in, &c); err != nil {
		os.Exit(1)
	}
	switch os.Getenv("CNI_COMMAND") {
	case "VERSION":
		os.Stdout.WriteString("{\"cniVersion\":\"1.0.0\",\"supportedVersions\":[\"0.3.0\",\"0.3.1\",\"0.4.0\",\"1.0.0\",\"1.1.0\"]}")
	case "ADD":
		if prev := c["prevResult"]; len(prev) > 0 {
			os.Stdout.Write(prev)
		} else {
			os.Stdout.WriteString("{\"cniVersion\":" + string(c["cniVersion"]) + "}")
		}
	}
}
`

// vethdelSrc deletes the link named by its first argument with one
// RTM_DELLINK and waits for the kernel's answer: exec plus the link delete,
// the least a plugin's DEL can cost. With a second argument, a network
// namespace path, it first enters that namespace (as a plugin deleting the
// pod's interface must).
const vethdelSrc = `package main

import (
	"encoding/binary"
	"fmt"
	"os"
	"runtime"
	"syscall"
)

func main() {
	name := os.Args[1]
	if len(os.Args) > 2 {
		runtime.LockOSThread()
		f, err := os.Open(os.Args[2])
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		// setns(2): the standard library names no number for it.
		nr := map[string]uintptr{"amd64": 308, "arm64": 268, "riscv64": 268, "386": 346, "arm": 375, "ppc64le": 350, "s390x": 339}[runtime.GOARCH]
		if _, _, e := syscall.RawSyscall(nr, f.Fd(), syscall.CLONE_NEWNET, 0); nr == 0 || e != 0 {
			fmt.Fprintln(os.Stderr, "setns:", e)
			os.Exit(1)
		}
		f.Close()
	}
	fd, err := syscall.Socket(syscall.AF_NETLINK, syscall.SOCK_RAW|syscall.SOCK_CLOEXEC, syscall.NETLINK_ROUTE)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	attr := 4 + len(name) + 1
	msg := make([]byte, 16+16+(attr+3)&^3)
	ne := binary.NativeEndian
	ne.PutUint32(msg[0:], uint32(len(msg)))
	ne.PutUint16(msg[4:], syscall.RTM_DELLINK)
	ne.PutUint16(msg[6:], syscall.NLM_F_REQUEST|syscall.NLM_F_ACK)
	ne.PutUint32(msg[8:], 1)
	ne.PutUint16(msg[32:], uint16(attr))
	ne.PutUint16(msg[34:], syscall.IFLA_IFNAME)
	copy(msg[36:], name)
	if err := syscall.Sendto(fd, msg, 0, &syscall.SockaddrNetlink{Family: syscall.AF_NETLINK}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	buf := make([]byte, 4096)
	n, _, err := syscall.Recvfrom(fd, buf, 0)
	if err != nil || n < 20 || ne.Uint16(buf[4:]) != syscall.NLMSG_ERROR {
		fmt.Fprintln(os.Stderr, "no answer", err)
		os.Exit(1)
	}
	if e := int32(ne.Uint32(buf[16:])); e != 0 {
		fmt.Fprintln(os.Stderr, syscall.Errno(-e))
		os.Exit(1)
	}
}
`

// rssMarker starts the wrapper's report line on stderr.
const rssMarker = "cnibox-bench-maxrss "

const rsswrapSrc = `package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
)

func main() {
	cmd := exec.Command(os.Args[1])
	cmd.Args = os.Args[1:]
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	err := cmd.Run()
	if cmd.ProcessState != nil {
		if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
			fmt.Fprintf(os.Stderr, "\n` + rssMarker + `%d\n", ru.Maxrss)
		}
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		os.Exit(ee.ExitCode())
	} else if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(127)
	}
}
`
