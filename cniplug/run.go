package cniplug

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/utils"
	"github.com/containernetworking/cni/pkg/version"
)

// MaxConfigBytes bounds what is read from stdin: a network config larger than
// this is refused rather than parsed.
const MaxConfigBytes = 4 << 20

// MaxContainerIDBytes bounds CNI_CONTAINERID: runtimes use 64 hex digits,
// and store keys built from it must stay far below bbolt's 32 KiB limit.
const MaxContainerIDBytes = 1024

// errNoCommand marks a role run by hand without CNI_COMMAND.
var errNoCommand = errors.New("CNI_COMMAND is not set")

// Invocation is the raw input of one call.
type Invocation struct {
	Getenv   func(string) string
	Stdin    io.Reader
	Stderr   io.Writer
	Registry *Registry
	// Version is cnibox's own build version, carried as build metadata in
	// the version line of a role run without CNI_COMMAND.
	Version string

	// seen receives the call's Args once they exist (Main's log record).
	seen func(*Args)
}

// Main runs role as a CNI plugin and returns the process exit code. Stdout gets
// only the result or the CNI error JSON.
func Main(ctx context.Context, role *Role, inv Invocation, stdout io.Writer) int {
	var stdin []byte
	if inv.Getenv("CNI_COMMAND") != "" {
		stdin, _ = io.ReadAll(io.LimitReader(inv.Stdin, MaxConfigBytes+1))
		inv.Stdin = bytes.NewReader(stdin)
	}
	start := time.Now()
	var a *Args
	inv.seen = func(x *Args) {
		a = x
		a.log = &callLog{start: start, last: start}
	}
	out, err := invokeRecovered(ctx, role, inv)
	if errors.Is(err, errNoCommand) {
		fmt.Fprintf(inv.Stderr, "%s\n%s\n\nThis is cnibox's %q CNI plugin. Container runtimes run it with CNI_COMMAND, CNI_CONTAINERID, CNI_NETNS, CNI_IFNAME, CNI_PATH set and the network config on stdin. Supported CNI versions: %s.\nTo run a network by hand, see `cnibox exec --help`; `cnibox --help` lists every command.\n",
			VersionLine(role, inv.Version), role.About, role.Name, strings.Join(SupportedVersions, ", "))
		// Exit 0, as the reference plugins do (skel prints the about string
		// and returns no error): nerdctl's probe of the firewall's version
		// runs it with exec.Cmd.Run and treats any other exit as "cannot
		// tell", so the version line would go unread.
		return 0
	}
	writeLog(role, inv, stdin, a, out, err, start)
	if err != nil {
		writeError(stdout, inv.Stderr, stdin, role.Name+" "+inv.Getenv("CNI_COMMAND"), err)
		return 1
	}
	if len(out) > 0 {
		stdout.Write(out)
	}
	return 0
}

// writeError answers err as CNI error JSON on stdout (in the config's
// cniVersion when stdin has one) and says it on stderr.
func writeError(stdout, stderr io.Writer, stdin []byte, what string, err error) {
	te := AsTypesError(err)
	body := struct {
		CNIVersion string `json:"cniVersion,omitempty"`
		*types.Error
	}{errorVersion(stdin), te}
	b, _ := json.Marshal(body)
	stdout.Write(append(b, '\n'))
	fmt.Fprintf(stderr, "cnibox %s: error %d: %s\n", what, te.Code, te.Msg)
}

// MainUnknown answers a CNI call made under a name that is no role of reg
// (a symlink named after a plugin cnibox does not have): CNI error JSON with
// code 4 for every verb, VERSION included, naming the roles there are, so a
// runtime reports a missing plugin instead of failing to parse the answer.
// Code 4 rather than 1: nothing is wrong with the version; the plugin the
// runtime's environment names (the config's type found in CNI_PATH) is not
// here.
func MainUnknown(name string, reg *Registry, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) int {
	in, _ := io.ReadAll(io.LimitReader(stdin, MaxConfigBytes+1))
	err := Errorf(types.ErrInvalidEnvironmentVariables, "cnibox has no CNI plugin %q (called as %s with CNI_COMMAND=%s); it has: %s",
		name, name, getenv("CNI_COMMAND"), strings.Join(reg.Names(), ", "))
	writeError(stdout, stderr, in, name+" "+getenv("CNI_COMMAND"), err)
	return 1
}

// invokeRecovered is Invoke that answers a panic with an error of
// CodeInternal: the runtime gets CNI error JSON, and the undo steps of the
// call (Undo.Finish) have run.
func invokeRecovered(ctx context.Context, role *Role, inv Invocation) (out []byte, err error) {
	defer recoverCall(&err, func(format string, args ...any) { fmt.Fprintf(inv.Stderr, format+"\n", args...) })
	return Invoke(ctx, role, inv)
}

// errorVersion is the cniVersion of an error reply: the config's when it can
// be read, else none.
func errorVersion(stdin []byte) string {
	var c struct {
		CNIVersion string `json:"cniVersion"`
	}
	if json.Unmarshal(stdin, &c) != nil {
		return ""
	}
	return c.CNIVersion
}

// requiredEnv returns the environment variables a verb needs, and whether
// cmd is a verb. (A switch, not a map: a package-level map is built by code
// at every start of every role.)
func requiredEnv(cmd string) ([]string, bool) {
	switch cmd {
	case "ADD", "CHECK":
		return []string{"CNI_CONTAINERID", "CNI_NETNS", "CNI_IFNAME", "CNI_PATH"}, true
	case "DEL":
		return []string{"CNI_CONTAINERID", "CNI_IFNAME", "CNI_PATH"}, true
	case "GC", "STATUS":
		return []string{"CNI_PATH"}, true
	}
	return nil, false
}

// minVersion returns the lowest config version that allows a verb, or "".
func minVersion(cmd string) string {
	switch cmd {
	case "CHECK":
		return "0.4.0"
	case "GC", "STATUS":
		return "1.1.0"
	}
	return ""
}

// Invoke runs one call of role and returns what belongs on stdout.
func Invoke(ctx context.Context, role *Role, inv Invocation) ([]byte, error) {
	cmd := inv.Getenv("CNI_COMMAND")
	if cmd == "" {
		return nil, errNoCommand
	}
	if cmd == "VERSION" {
		var b bytes.Buffer
		if err := version.PluginSupports(SupportedVersions...).Encode(&b); err != nil {
			return nil, WithCode(types.ErrIOFailure, err)
		}
		return b.Bytes(), nil
	}
	req, known := requiredEnv(cmd)
	if !known {
		return nil, Errorf(types.ErrInvalidEnvironmentVariables, "CNI_COMMAND %q is not a CNI verb (want ADD, DEL, CHECK, GC, STATUS or VERSION)", cmd)
	}
	var missing []string
	for _, k := range req {
		if inv.Getenv(k) == "" {
			missing = append(missing, k)
		}
	}
	if len(missing) > 0 {
		return nil, Errorf(types.ErrInvalidEnvironmentVariables, "required environment variables missing for %s: %s", cmd, strings.Join(missing, ", "))
	}
	a := &Args{
		Command:     cmd,
		ContainerID: inv.Getenv("CNI_CONTAINERID"),
		Netns:       inv.Getenv("CNI_NETNS"),
		IfName:      inv.Getenv("CNI_IFNAME"),
		Path:        filepath.SplitList(inv.Getenv("CNI_PATH")),
		RawArgs:     inv.Getenv("CNI_ARGS"),
		Registry:    inv.Registry,
		Stderr:      inv.Stderr,
		Getenv:      inv.Getenv,
	}
	if inv.seen != nil {
		inv.seen(a)
	}
	if a.ContainerID != "" {
		if err := utils.ValidateContainerID(a.ContainerID); err != nil {
			return nil, Errorf(types.ErrInvalidEnvironmentVariables, "CNI_CONTAINERID %q: %s (letters, digits, '_', '.', '-' only)", a.ContainerID, err.Msg)
		}
		if len(a.ContainerID) > MaxContainerIDBytes {
			return nil, Errorf(types.ErrInvalidEnvironmentVariables, "CNI_CONTAINERID is %d bytes long: at most %d are accepted", len(a.ContainerID), MaxContainerIDBytes)
		}
	}
	if a.IfName != "" {
		if err := utils.ValidateInterfaceName(a.IfName); err != nil {
			return nil, Errorf(types.ErrInvalidEnvironmentVariables, "CNI_IFNAME %q: %s (at most 15 bytes, no '/', ':' or whitespace)", a.IfName, err.Msg)
		}
	}
	stdin, err := io.ReadAll(io.LimitReader(inv.Stdin, MaxConfigBytes+1))
	if err != nil {
		return nil, Errorf(types.ErrIOFailure, "read the network config from stdin: %w", err)
	}
	res, err := run(ctx, role, a, stdin)
	if err != nil || cmd != "ADD" {
		return nil, err
	}
	return encodeResult(res, a.Conf.CNIVersion)
}

// run decodes and checks the network config and CNI_ARGS into a and runs the
// verb a.Command of role. Only ADD has a result.
func run(ctx context.Context, role *Role, a *Args, stdin []byte) (types.Result, error) {
	if len(stdin) > MaxConfigBytes {
		return nil, Errorf(types.ErrDecodingFailure, "stdin: the network config is larger than %d bytes", MaxConfigBytes)
	}
	a.StdinData = stdin
	conf, err := decodeConf(stdin)
	if err != nil {
		return nil, err
	}
	a.Conf = conf
	if err := utils.ValidateNetworkName(conf.Name); err != nil {
		return nil, Errorf(types.ErrInvalidNetworkConfig, "config field \"name\" %q: %s", conf.Name, err.Msg)
	}
	if err := checkVersion(a.Command, conf.CNIVersion); err != nil {
		return nil, err
	}
	if err := types.LoadArgs(a.RawArgs, &a.CNIArgs); err != nil {
		return nil, Errorf(types.ErrInvalidEnvironmentVariables, "CNI_ARGS %q: %v (add IgnoreUnknown=1 to pass keys this plugin does not know)", a.RawArgs, err)
	}

	res, err := role.Verbs.Run(ctx, a)
	if a.Command != "ADD" {
		return nil, err
	}
	if err == nil && res == nil {
		err = Errorf(types.ErrInternal, "the plugin returned no result")
	}
	return res, err
}

func checkVersion(cmd, v string) error {
	if v == "" {
		v = "0.1.0"
	}
	supported := false
	for _, s := range SupportedVersions {
		supported = supported || s == v
	}
	if !supported {
		return Errorf(types.ErrIncompatibleCNIVersion, "config field \"cniVersion\" %q is not supported: cnibox speaks %s", v, strings.Join(SupportedVersions, ", "))
	}
	if min := minVersion(cmd); min != "" {
		if ok, _ := version.GreaterThanOrEqualTo(v, min); !ok {
			return Errorf(types.ErrIncompatibleCNIVersion, "%s needs cniVersion %s or later; the config says %q", cmd, min, v)
		}
	}
	return nil
}

func encodeResult(res types.Result, v string) ([]byte, error) {
	if res == nil {
		return nil, Errorf(types.ErrInternal, "the plugin returned no result")
	}
	conv, err := res.GetAsVersion(v)
	if err != nil {
		return nil, Errorf(types.ErrIncompatibleCNIVersion, "convert the result to cniVersion %s: %w", v, err)
	}
	var b bytes.Buffer
	if err := conv.PrintTo(&b); err != nil {
		return nil, WithCode(types.ErrIOFailure, err)
	}
	return b.Bytes(), nil
}
