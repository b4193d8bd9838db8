package cniplug

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"os"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
)

// echoRole returns one address and records what it saw.
func echoRole(seen *[]*Args) *Role {
	return &Role{
		Name: "echo",
		Verbs: &ConfVerbs[NoConf]{
			Add: func(_ context.Context, a *Args, _ NoConf) (types.Result, error) {
				*seen = append(*seen, a)
				return &current.Result{CNIVersion: current.ImplementedSpecVersion,
					IPs: []*current.IPConfig{{Address: net.IPNet{IP: net.IPv4(10, 0, 0, 2), Mask: net.CIDRMask(24, 32)}}}}, nil
			},
			Del: func(_ context.Context, a *Args, _ NoConf) error { *seen = append(*seen, a); return nil },
			GC:  func(_ context.Context, a *Args, _ NoConf) error { *seen = append(*seen, a); return nil },
		},
	}
}

func call1(t *testing.T, role *Role, env map[string]string, stdin string) ([]byte, error) {
	t.Helper()
	base := map[string]string{"CNI_CONTAINERID": "c1", "CNI_NETNS": "/run/netns/x", "CNI_IFNAME": "eth0", "CNI_PATH": "/opt/cni/bin"}
	for k, v := range env {
		base[k] = v
	}
	return Invoke(context.Background(), role, Invocation{
		Getenv: func(k string) string { return base[k] }, Stdin: strings.NewReader(stdin), Registry: NewRegistry(role),
	})
}

func TestInvokeErrors(t *testing.T) {
	var seen []*Args
	role := echoRole(&seen)
	conf := func(v string) string { return `{"cniVersion":"` + v + `","name":"n","type":"echo"}` }
	cases := []struct {
		name  string
		env   map[string]string
		stdin string
		code  uint
		says  string
	}{
		{"unknown verb", map[string]string{"CNI_COMMAND": "FROB"}, conf("1.0.0"), 4, "FROB"},
		{"missing netns on ADD", map[string]string{"CNI_COMMAND": "ADD", "CNI_NETNS": ""}, conf("1.0.0"), 4, "CNI_NETNS"},
		{"bad container id", map[string]string{"CNI_COMMAND": "ADD", "CNI_CONTAINERID": "../etc"}, conf("1.0.0"), 4, "CNI_CONTAINERID"},
		{"ifname too long", map[string]string{"CNI_COMMAND": "ADD", "CNI_IFNAME": "a-very-long-ifname"}, conf("1.0.0"), 4, "CNI_IFNAME"},
		{"not json", map[string]string{"CNI_COMMAND": "ADD"}, `{"cniVersion":`, 6, "JSON"},
		{"no name", map[string]string{"CNI_COMMAND": "ADD"}, `{"cniVersion":"1.0.0"}`, 7, "name"},
		{"unsupported version", map[string]string{"CNI_COMMAND": "ADD"}, conf("0.2.0"), 1, "0.2.0"},
		{"CHECK before 0.4.0", map[string]string{"CNI_COMMAND": "CHECK"}, conf("0.3.1"), 1, "CHECK"},
		{"GC before 1.1.0", map[string]string{"CNI_COMMAND": "GC"}, conf("1.0.0"), 1, "GC"},
		{"STATUS before 1.1.0", map[string]string{"CNI_COMMAND": "STATUS"}, conf("1.0.0"), 1, "STATUS"},
		{"unknown CNI_ARGS", map[string]string{"CNI_COMMAND": "ADD", "CNI_ARGS": "FOO=bar"}, conf("1.0.0"), 4, "IgnoreUnknown"},
		{"bad prevResult", map[string]string{"CNI_COMMAND": "DEL"}, `{"cniVersion":"1.0.0","name":"n","prevResult":{"ips":"x"}}`, 6, "prevResult"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := call1(t, role, tc.env, tc.stdin)
			if got := CodeOf(err); err == nil || got != tc.code {
				t.Fatalf("code %d (%v), want %d", got, err, tc.code)
			}
			if !strings.Contains(err.Error(), tc.says) {
				t.Errorf("error %q does not mention %q", err, tc.says)
			}
		})
	}
}

func TestInvokeVersionsAndArgs(t *testing.T) {
	var seen []*Args
	role := echoRole(&seen)
	for _, v := range SupportedVersions {
		out, err := call1(t, role, map[string]string{"CNI_COMMAND": "ADD",
			"CNI_ARGS": "IgnoreUnknown=1;K8S_POD_NAMESPACE=ns;K8S_POD_NAME=p;FOO=bar"},
			`{"cniVersion":"`+v+`","name":"n","type":"echo","args":{"cni":{"ips":["10.0.0.9"]}},"runtimeConfig":{"ips":["10.0.0.8/24"],"mac":"0a:58:0a:00:00:08"}}`)
		if err != nil {
			t.Fatalf("%s: %v", v, err)
		}
		var res map[string]any
		if err := json.Unmarshal(out, &res); err != nil || res["cniVersion"] != v {
			t.Errorf("%s: result %s not in the config's version", v, out)
		}
		a := seen[len(seen)-1]
		if a.CNIArgs.Pod() != "ns/p" {
			t.Errorf("pod = %q", a.CNIArgs.Pod())
		}
		ips, err := a.RequestedIPs()
		if err != nil || len(ips) != 2 || ips[0].String() != "10.0.0.9" || ips[1].String() != "10.0.0.8" {
			t.Errorf("requested IPs = %v, %v", ips, err)
		}
		if mac, err := a.RequestedMAC(); err != nil || mac.String() != "0a:58:0a:00:00:08" {
			t.Errorf("requested MAC = %v, %v", mac, err)
		}
	}
	// GC accepts both spellings of the valid list.
	for _, key := range []string{"cni.dev/valid-attachments", "cni.dev/attachments"} {
		_, err := call1(t, role, map[string]string{"CNI_COMMAND": "GC"},
			`{"cniVersion":"1.1.0","name":"n","type":"echo","`+key+`":[{"containerID":"k1","ifname":"eth0"}]}`)
		if err != nil {
			t.Fatal(err)
		}
		a := seen[len(seen)-1]
		if !a.Conf.Keeps("k1", "eth0") || a.Conf.Keeps("k2", "eth0") {
			t.Errorf("%s: Keeps wrong", key)
		}
	}
}

func TestMainPrintsErrorJSON(t *testing.T) {
	var seen []*Args
	role := echoRole(&seen)
	var out, errOut bytes.Buffer
	logFile := t.TempDir() + "/cnibox.log"
	env := map[string]string{"CNI_COMMAND": "ADD", "CNIBOX_LOG_FILE": logFile}
	code := Main(context.Background(), role, Invocation{Getenv: func(k string) string { return env[k] },
		Stdin: strings.NewReader(`{"cniVersion":"1.0.0","name":"n"}`), Stderr: &errOut}, &out)
	if code != 1 {
		t.Fatalf("exit %d", code)
	}
	var e struct {
		CNIVersion string `json:"cniVersion"`
		Code       uint   `json:"code"`
		Msg        string `json:"msg"`
	}
	if err := json.Unmarshal(out.Bytes(), &e); err != nil || e.Code != 4 || e.CNIVersion != "1.0.0" || !strings.Contains(e.Msg, "CNI_CONTAINERID") {
		t.Errorf("stdout %q: want error JSON code 4 naming CNI_CONTAINERID", out.String())
	}
	if rec, err := os.ReadFile(logFile); err != nil || !strings.Contains(string(rec), `"code":4`) {
		t.Errorf("log record %q (%v): want the failed call with code 4", rec, err)
	}
	// Without CNI_COMMAND: an explanation on stderr, nothing on stdout, exit 0.
	out.Reset()
	errOut.Reset()
	code = Main(context.Background(), role, Invocation{Getenv: func(string) string { return "" }, Stdin: strings.NewReader(""), Stderr: &errOut}, &out)
	if code != 0 || out.Len() != 0 || !strings.Contains(errOut.String(), "cnibox --help") {
		t.Errorf("no CNI_COMMAND: exit %d, stdout %q, stderr %q", code, out.String(), errOut.String())
	}
	// VERSION lists every supported version.
	out.Reset()
	env = map[string]string{"CNI_COMMAND": "VERSION", "CNIBOX_LOG_FILE": logFile}
	Main(context.Background(), role, Invocation{Getenv: func(k string) string { return env[k] }, Stdin: strings.NewReader(""), Stderr: &errOut}, &out)
	for _, v := range SupportedVersions {
		if !strings.Contains(out.String(), `"`+v+`"`) {
			t.Errorf("VERSION output %s lacks %s", out.String(), v)
		}
	}
}

// TestInProcessDelegation: a delegate that is a role of the registry runs in
// process with the caller's container, netns and ifname; its error keeps its code.
func TestInProcessDelegation(t *testing.T) {
	var seen []*Args
	inner := echoRole(&seen)
	failing := &Role{Name: "full", Verbs: &ConfVerbs[NoConf]{Add: func(context.Context, *Args, NoConf) (types.Result, error) {
		return nil, Errorf(CodePoolExhausted, "pool full")
	}}}
	var got types.Result
	var delErr error
	outer := &Role{Name: "outer", Verbs: &ConfVerbs[NoConf]{Add: func(ctx context.Context, a *Args, _ NoConf) (types.Result, error) {
		r, err := a.DelegateAdd(ctx, "echo", []byte(`{"cniVersion":"1.0.0","name":"n","type":"echo"}`))
		got = r
		if err != nil {
			return nil, err
		}
		delErr = a.DelegateDel(ctx, "echo", []byte(`{"cniVersion":"1.0.0","name":"n","type":"echo"}`))
		_, err = a.DelegateAdd(ctx, "full", []byte(`{"cniVersion":"1.0.0","name":"n","type":"full"}`))
		return r, err
	}}}
	reg := NewRegistry(outer, inner, failing)
	env := map[string]string{"CNI_COMMAND": "ADD", "CNI_CONTAINERID": "c9", "CNI_NETNS": "/run/netns/p", "CNI_IFNAME": "net1", "CNI_PATH": "/nonexistent"}
	_, err := Invoke(context.Background(), outer, Invocation{Getenv: func(k string) string { return env[k] },
		Stdin: strings.NewReader(`{"cniVersion":"1.0.0","name":"n","type":"outer"}`), Registry: reg})
	if CodeOf(err) != CodePoolExhausted {
		t.Errorf("delegate error code %d (%v), want %d", CodeOf(err), err, CodePoolExhausted)
	}
	if got == nil || delErr != nil || len(seen) != 2 {
		t.Fatalf("delegate result %v, del err %v, calls %d", got, delErr, len(seen))
	}
	if a := seen[0]; a.ContainerID != "c9" || a.Netns != "/run/netns/p" || a.IfName != "net1" || a.Command != "ADD" || seen[1].Command != "DEL" {
		t.Errorf("delegate saw %+v", a)
	}
	// A type that is neither a role nor in CNI_PATH is a config error naming it.
	_, err = (&Args{Registry: reg, Path: []string{"/nonexistent"}}).DelegateAdd(context.Background(), "nosuch", []byte(`{}`))
	if CodeOf(err) != types.ErrInvalidNetworkConfig || !strings.Contains(err.Error(), "nosuch") {
		t.Errorf("missing plugin: %v", err)
	}
}

// TestDelegateSeesCallerEnv: an in-process delegate reads the caller's
// environment (e.g. CNIBOX_DATA_DIR), not the process's, and its own CNI_*.
func TestDelegateSeesCallerEnv(t *testing.T) {
	var dataDir, ifname string
	inner := &Role{Name: "inner", Verbs: &ConfVerbs[NoConf]{Add: func(_ context.Context, a *Args, _ NoConf) (types.Result, error) {
		dataDir, ifname = a.Getenv("CNIBOX_DATA_DIR"), a.Getenv("CNI_IFNAME")
		return &current.Result{CNIVersion: current.ImplementedSpecVersion}, nil
	}}}
	outer := &Role{Name: "outer", Verbs: &ConfVerbs[NoConf]{Add: func(ctx context.Context, a *Args, _ NoConf) (types.Result, error) {
		return a.DelegateAddAs(ctx, "inner", []byte(`{"cniVersion":"1.0.0","name":"n","type":"inner"}`), "net1")
	}}}
	env := map[string]string{"CNI_COMMAND": "ADD", "CNI_CONTAINERID": "c", "CNI_NETNS": "/run/netns/p", "CNI_IFNAME": "eth0",
		"CNI_PATH": "/nonexistent", "CNIBOX_DATA_DIR": "/tmp/caller-only"}
	_, err := Invoke(context.Background(), outer, Invocation{Getenv: func(k string) string { return env[k] },
		Stdin: strings.NewReader(`{"cniVersion":"1.0.0","name":"n","type":"outer"}`), Registry: NewRegistry(outer, inner)})
	if err != nil || dataDir != "/tmp/caller-only" || ifname != "net1" {
		t.Errorf("delegate saw CNIBOX_DATA_DIR %q CNI_IFNAME %q (err %v), want the caller's and net1", dataDir, ifname, err)
	}
}
