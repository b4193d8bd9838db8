package podapi

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"reflect"
	"strings"
	"testing"

	"github.com/cnibox/cnibox/internal/agentapi"
	"github.com/cnibox/cnibox/internal/cniargs"
)

// fuzzSource answers every pod and every NAD, whose config is the fuzzed
// one: what the pod API decides is all the allowlist's.
type fuzzSource struct{ config string }

func (s fuzzSource) Pod(_ context.Context, ns, name, uid string) (*agentapi.Pod, error) {
	return &agentapi.Pod{Namespace: ns, Name: name, UID: uid}, nil
}

func (s fuzzSource) NetAttachDef(_ context.Context, ns, name string) (*agentapi.NetAttachDef, error) {
	return &agentapi.NetAttachDef{Namespace: ns, Name: name, Config: s.config}, nil
}

func (s fuzzSource) SetNetworkStatus(context.Context, string, string, string, json.RawMessage) error {
	return nil
}

// fuzzTrust trusts kube-system only, as the agent does by default.
var fuzzTrust, _ = ParseNADTrust(DefaultNADTrust)

// grantsOnlyAllowed fails t unless a NAD of namespace ns that the pod API
// served with the request's cni-args stays within the allowlist once they
// are merged, and no plugin got a gated key without its capability.
func grantsOnlyAllowed(t *testing.T, ns, config string, rawArgs json.RawMessage) {
	t.Helper()
	var args map[string]any
	// A blank spec.config (whitespace only) is the node's own file, as
	// multi reads it: nothing of the NAD to check.
	blank := strings.TrimSpace(config) == ""
	if json.Unmarshal(rawArgs, &args) != nil || len(args) == 0 || blank {
		args = nil
	}
	merged := []byte(config)
	if args != nil {
		m, err := cniargs.Merge(cniargs.AsList(merged), args)
		if err != nil {
			t.Fatalf("served %s/x with cni-args %s that do not merge: %v", ns, rawArgs, err)
		}
		merged = m
		got, orig := pluginsOf(merged), pluginsOf(cniargs.AsList([]byte(config)))
		for i, p := range got {
			for k := range args {
				c := capabilityOfKey(k)
				if c == "" || p.Capabilities[c] {
					continue
				}
				var was any
				if i < len(orig) {
					was = orig[i].Args.CNI[k]
				}
				if !reflect.DeepEqual(p.Args.CNI[k], was) {
					t.Fatalf("cni-args %q reached plugins[%d], which does not declare %s: %s", k, i, c, merged)
				}
			}
		}
	}
	if !fuzzTrust.Trusts(ns) && !blank {
		if err := walkNAD(string(merged)); err != nil {
			t.Fatalf("served %s/x (untrusted) whose config with cni-args %s the allowlist refuses: %v\n%s", ns, rawArgs, err, merged)
		}
	}
}

// capabilityOfKey is cniargs' reading of a cni-args key (which capability
// it asks for), by the same decoder.
func capabilityOfKey(k string) string {
	_, err := cniargs.Merge([]byte(`{"name":"n","plugins":[{}]}`), map[string]any{k: 1})
	var ne *cniargs.NotEntitledError
	if errors.As(err, &ne) {
		return ne.Capability
	}
	return ""
}

// plugin is what the gate looks at in a plugin's config, as libcni and
// the roles decode it.
type plugin struct {
	Capabilities map[string]bool `json:"capabilities"`
	Args         struct {
		CNI map[string]any `json:"cni"`
	} `json:"args"`
}

// pluginsOf decodes a conflist's plugins (none when it does not decode).
func pluginsOf(list []byte) []plugin {
	var l struct {
		Plugins []plugin `json:"plugins"`
	}
	_ = json.Unmarshal(list, &l)
	return l.Plugins
}

// FuzzPodAPIRequest feeds the pod API any request line, with any NAD
// config behind it, through serveConn (the socket's decoding and
// answer). It never panics, always answers one JSON line, and what it
// serves of an untrusted namespace stays within the allowlist with the
// request's cni-args merged (and no capability key reaches a plugin that
// does not declare it).
func FuzzPodAPIRequest(f *testing.F) {
	for _, s := range [][2]string{
		{`{"op":"netattachdef","namespace":"team-a","name":"n","podNamespace":"team-a","cniArgs":{"sysctl":{"net.ipv4.ip_forward":"1"}}}`,
			`{"cniVersion":"1.0.0","name":"n","type":"tuning"}`},
		{`{"op":"netattachdef","namespace":"team-a","name":"n","cniArgs":{"mac":"02:00:00:00:00:01","IPs":["10.1.0.2/24"]}}`,
			`{"cniVersion":"1.0.0","name":"n","plugins":[{"type":"dummy","capabilities":{"ips":true},"ipam":{"type":"static"}},{"type":"tuning"}]}`},
		{`{"op":"netattachdef","namespace":"kube-system","name":"n","cniArgs":{"portMappings":[{"hostPort":22}]}}`,
			`{"cniVersion":"1.0.0","name":"n","type":"bridge","ipam":{"type":"host-local"}}`},
		{`{"op":"netattachdef","namespace":"team-a","name":"n","cniArgs":[1]}`, `{"type":"dummy"}`},
		{`{"op":"netattachdef","namespace":"team-a","name":"n","cniArgs":{"x":1}}`, `{"plugins":[null]}`},
		{`{"op":"pod","namespace":"team-a","name":"p","uid":"u"}`, ``},
		{`{"op":"setnetworkstatus","namespace":"team-a","name":"p","networkStatus":"[{]"}`, ``},
		{`{"op":"events","namespace":"a","name":"p","events":[{"type":"Normal","reason":"r","message":"m"}]}`, ``},
		{`{"op":"ipam-allocate","ipam":{}}`, ``},
		{`not json`, ``},
		{"{\"op\":\"pod\"}\n{\"op\":\"pod\"}", ``},
		{reproNADRequest, reproNADConfig},
	} {
		f.Add(s[0], s[1])
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	f.Fuzz(func(t *testing.T, line, config string) {
		client, server := net.Pipe()
		done := make(chan struct{})
		go func() {
			defer close(done)
			serveConn(context.Background(), server, fuzzSource{config: config}, log, Access{GID: NoGroup, NADTrust: fuzzTrust})
		}()
		go func() { _, _ = client.Write([]byte(line + "\n")) }()
		out, err := agentapi.ReadLine(bufio.NewReader(client))
		client.Close()
		<-done
		var req agentapi.Request
		if json.Unmarshal([]byte(line), &req) != nil {
			return // answered or not, it must not have panicked
		}
		if err != nil {
			return // a line ReadLine refuses (too long, a newline inside)
		}
		var resp agentapi.Response
		if err := json.Unmarshal(out, &resp); err != nil {
			t.Fatalf("answer %q is not JSON: %v", out, err)
		}
		if resp.NetAttachDef != nil {
			if resp.Error != "" {
				t.Fatalf("a NAD and an error: %s", out)
			}
			grantsOnlyAllowed(t, req.Namespace, config, req.CNIArgs)
		}
	})
}

// reproNADRequest and reproNADConfig are issue 48's NAD asked for by a
// pod of team-a.
const (
	reproNADRequest = `{"op":"netattachdef","namespace":"team-a","name":"spoof","podNamespace":"team-a"}`
	reproNADConfig  = `{"cniVersion":"1.0.0","name":"spoof","type":"macvlan","linkInContainer":true,"mode":"passthru","ipam":{"type":"static","addresses":[{"address":"10.99.0.1/32"}]}}`
)

// FuzzCNIArgsMerge feeds the cni-args merge any config and any cni-args:
// Merge never panics; what checkCNIArgs lets through for an untrusted
// namespace (after checkNADConfig) the allowlist takes with the cni-args
// merged, and a capability key reaches only plugins that declare it.
func FuzzCNIArgsMerge(f *testing.F) {
	for _, s := range [][2]string{
		{`{"cniVersion":"1.0.0","name":"n","plugins":[{"type":"dummy","capabilities":{"ips":true},"ipam":{"type":"static"}},{"type":"tuning"}]}`, `{"ips":["10.1.0.2/24"],"sysctl":{"net.core.somaxconn":"9"}}`},
		{`{"cniVersion":"1.0.0","name":"n","type":"tuning","Capabilities":{"mac":true},"capabilities":{"mac":false}}`, `{"MAC":"02:00:00:00:00:01"}`},
		{`{"cniVersion":"1.0.0","name":"n","type":"tuning","Args":{"cni":{}}}`, `{"sysctl":{"net.ipv4.conf.all.forwarding":"1"}}`},
		{`{"cniVersion":"1.0.0","name":"n","type":"dummy","args":{"cni":7}}`, `{"dataDir":"/x"}`},
		{`{"plugins":[{"args":[]}]}`, `{"a":null}`},
		{reproNADConfig, `{"ips":["10.99.0.1/32"]}`},
		{"  \n", `{"ips":["10.99.0.1/32"]}`}, // blank: the node's own file
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, config, rawArgs string) {
		var args map[string]any
		if json.Unmarshal([]byte(rawArgs), &args) == nil {
			_, _ = cniargs.Merge([]byte(config), args)
			_, _ = cniargs.Merge(cniargs.AsList([]byte(config)), args)
		}
		nad := &agentapi.NetAttachDef{Namespace: "team-a", Name: "x", Config: config}
		if checkNADConfig(nad, fuzzTrust) != nil || checkCNIArgs(nad, json.RawMessage(rawArgs), fuzzTrust) != nil {
			return
		}
		grantsOnlyAllowed(t, "team-a", config, json.RawMessage(rawArgs))
	})
}
