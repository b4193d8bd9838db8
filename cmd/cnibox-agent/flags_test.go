package main

import (
	"bufio"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// flanneldFlag is one line of testdata/flanneld-v0.28.9-flags.txt.
type flanneldFlag struct{ name, kind, def string }

func readFlanneldFlags(t *testing.T) []flanneldFlag {
	t.Helper()
	f, err := os.Open("testdata/flanneld-v0.28.9-flags.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []flanneldFlag
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		parts := strings.Fields(line)
		if len(parts) != 3 {
			t.Fatalf("bad line %q", line)
		}
		def := parts[2]
		if def == `""` {
			def = ""
		}
		out = append(out, flanneldFlag{parts[0], parts[1], def})
	}
	if len(out) != 31 {
		t.Fatalf("read %d flanneld flags, want 31 (28 of flannelFlags and klog's 3)", len(out))
	}
	return out
}

func noEnv(string) string { return "" }

// TestFlanneldFlags: every flag of flanneld v0.28.9 exists with its kind
// and its default.
func TestFlanneldFlags(t *testing.T) {
	fs := (&flags{set: map[string]bool{}}).flagSet(io.Discard)
	for _, ff := range readFlanneldFlags(t) {
		fl := fs.Lookup(ff.name)
		if fl == nil {
			t.Errorf("--%s: not defined", ff.name)
			continue
		}
		if fl.DefValue != ff.def {
			t.Errorf("--%s: default %q, flanneld's is %q", ff.name, fl.DefValue, ff.def)
		}
		isBool := false
		if b, ok := fl.Value.(interface{ IsBoolFlag() bool }); ok {
			isBool = b.IsBoolFlag()
		}
		if isBool != (ff.kind == "bool") {
			t.Errorf("--%s: bool flag %t, flanneld's kind is %s", ff.name, isBool, ff.kind)
		}
	}
}

// TestFlanneldManifestArgs: kube-flannel.yml's arguments parse.
func TestFlanneldManifestArgs(t *testing.T) {
	f, err := parseFlagsEnv([]string{"--ip-masq", "--kube-subnet-mgr", "--healthz-port=8081"}, io.Discard, noEnv)
	if err != nil {
		t.Fatal(err)
	}
	if !f.ipMasq || !f.kubeSubnetMgr || f.healthzAddr() != "0.0.0.0:8081" {
		t.Errorf("ip-masq %t kube-subnet-mgr %t healthz %q", f.ipMasq, f.kubeSubnetMgr, f.healthzAddr())
	}
	if !f.iptablesForwardRules || !f.setNodeNetworkUnavailable || f.blackholeRoute || f.resyncPeriod().Seconds() != 5 {
		t.Errorf("defaults: forward rules %t, set-node-network-unavailable %t, blackhole %t, resync %v; flanneld's are true, true, false, 5s",
			f.iptablesForwardRules, f.setNodeNetworkUnavailable, f.blackholeRoute, f.resyncPeriod())
	}
}

// TestFlagMeanings: what each flanneld flag sets, as flanneld reads it.
func TestFlagMeanings(t *testing.T) {
	for _, tc := range []struct {
		args  []string
		check func(f *flags) bool
	}{
		// flagSlice: every --iface is kept, in order.
		{[]string{"--iface", "eth1", "--iface", "10.0.0.2", "--iface=eth0"}, func(f *flags) bool {
			return slices.Equal(f.iface, []string{"eth1", "10.0.0.2", "eth0"})
		}},
		{[]string{"--iface-regex", "^10\\.0\\.", "--iface-regex", "^ens"}, func(f *flags) bool {
			return slices.Equal(f.ifaceRegex, []string{`^10\.0\.`, "^ens"})
		}},
		{[]string{"--iface-can-reach", "192.0.2.1"}, func(f *flags) bool { return f.ifaceCanReach == "192.0.2.1" }},
		{[]string{"--healthz-ip", "127.0.0.1", "--healthz-port", "8081"}, func(f *flags) bool { return f.healthzAddr() == "127.0.0.1:8081" }},
		{[]string{"--healthz-ip", "::1", "--healthz-port", "8081"}, func(f *flags) bool { return f.healthzAddr() == "[::1]:8081" }},
		{nil, func(f *flags) bool { return f.healthzAddr() == "" }}, // port 0: no server
		{[]string{"--iptables-resync", "1"}, func(f *flags) bool { return f.resyncPeriod().Seconds() == 1 }},
		{[]string{"--iptables-forward-rules=false"}, func(f *flags) bool { return !f.iptablesForwardRules }},
		{[]string{"--set-node-network-unavailable=false"}, func(f *flags) bool { return !f.setNodeNetworkUnavailable }},
		{[]string{"--ip-blackhole-route"}, func(f *flags) bool { return f.blackholeRoute }},
		{nil, func(f *flags) bool { return f.fastPath && f.fastPathPackets == 20 }}, // on by default
		{[]string{"--fast-path=false"}, func(f *flags) bool { return !f.fastPath }},
		{[]string{"--fast-path-packets", "5"}, func(f *flags) bool { return f.fastPathPackets == 5 }},
		{nil, func(f *flags) bool { return f.networkPolicy && !f.clusterNetworkPolicies }}, // on by default
		{[]string{"--network-policy=false"}, func(f *flags) bool { return !f.networkPolicy }},
		{[]string{"--cluster-network-policies"}, func(f *flags) bool { return f.clusterNetworkPolicies }},
		{[]string{"--multi-network-policies", "--pod-api"}, func(f *flags) bool { return f.multiNetworkPolicies }},
		{[]string{"--ip-masq-fully-random-disable"}, func(f *flags) bool { return f.ipMasqFullyRandomDisable }},
		{[]string{"--subnet-lease-renew-margin", "1439"}, func(f *flags) bool { return f.renewMarginDuration().Minutes() == 1439 }},
		{[]string{"-v", "2"}, func(f *flags) bool { return f.logLevelName() == "debug" }},
		{[]string{"-v=0"}, func(f *flags) bool { return f.logLevelName() == "info" }},
		{[]string{"-v=4", "--log-level=warn"}, func(f *flags) bool { return f.logLevelName() == "warn" }}, // cnibox's own wins
		{[]string{"-vmodule=main=4", "-log_backtrace_at=main.go:1"}, func(f *flags) bool { return f.vmodule == "main=4" }},
	} {
		f, err := parseFlagsEnv(tc.args, io.Discard, noEnv)
		if err != nil {
			t.Errorf("%q: %v", tc.args, err)
			continue
		}
		if !tc.check(f) {
			t.Errorf("%q: parsed as %+v", tc.args, *f)
		}
	}
}

// TestFlagErrors: what flanneld refuses at start, and what cnibox cannot
// run with, is an error naming the flag.
func TestFlagErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--subnet-lease-renew-margin", "0"}, "--subnet-lease-renew-margin"},
		{[]string{"--subnet-lease-renew-margin", "1440"}, "1 to 1439"},
		{[]string{"--iptables-resync", "0"}, "--iptables-resync"},
		{[]string{"--healthz-port", "70000"}, "--healthz-port"},
		{[]string{"--fast-path-packets", "0"}, "--fast-path-packets"},
		{[]string{"--healthz-port", "8081", "--healthz-ip", "localhost"}, "--healthz-ip"},
		{[]string{"-v", "-1"}, "-v"},
		{[]string{"--healthz-port", "x"}, "healthz-port"},
		{[]string{"--multus-conf-dir", "/host/etc/cni/net.d"}, "--pod-api-only"},
		{[]string{"--multi-network-policies"}, "add --pod-api"},
		{[]string{"--multi-network-policies", "--pod-api-only"}, "add --pod-api"},
		{[]string{"--nad-trusted-namespaces", "kube-system,Team_A"}, "--nad-trusted-namespaces"},
	} {
		_, err := parseFlagsEnv(tc.args, io.Discard, noEnv)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: err %v, want one naming %s", tc.args, err, tc.want)
		}
	}
}

// TestNADTrustFlag: by default only kube-system's NADs may use anything;
// the flag lists others, "*" all, "" none.
func TestNADTrustFlag(t *testing.T) {
	for _, tc := range []struct {
		args             []string
		kubeSystem, team bool
	}{
		{nil, true, false},
		{[]string{"--nad-trusted-namespaces", "team-a, kube-system"}, true, true},
		{[]string{"--nad-trusted-namespaces", "*"}, true, true},
		{[]string{"--nad-trusted-namespaces="}, false, false},
	} {
		f, err := parseFlagsEnv(tc.args, io.Discard, noEnv)
		if err != nil {
			t.Fatalf("%q: %v", tc.args, err)
		}
		if got := f.pod.nadTrust; got.Trusts("kube-system") != tc.kubeSystem || got.Trusts("team-a") != tc.team {
			t.Errorf("%q: trusts kube-system %v, team-a %v; want %v, %v", tc.args, got.Trusts("kube-system"), got.Trusts("team-a"), tc.kubeSystem, tc.team)
		}
	}
}

// sample is a value each kind of flag takes, different from its default.
func sample(ff flanneldFlag) string {
	switch ff.kind {
	case "bool":
		if ff.def == "true" {
			return "false"
		}
		return "true"
	case "int":
		return "7"
	}
	switch ff.name {
	case "healthz-ip":
		return "127.0.0.1"
	case "iface-can-reach", "public-ip":
		return "192.0.2.1"
	case "public-ipv6":
		return "2001:db8::1"
	}
	return "x-" + ff.name
}

// TestFlanneldEnv: every flag is also read from FLANNELD_<FLAG> (the name
// upper-cased, '-' as '_'), as coreos/pkg's flagutil.SetFlagsFromEnv does
// for flanneld; the command line wins; an empty variable is unset.
func TestFlanneldEnv(t *testing.T) {
	env := map[string]string{}
	want := map[string]string{}
	for _, ff := range readFlanneldFlags(t) {
		if ff.name == "version" {
			continue // would only print the version
		}
		v := sample(ff)
		env[envName(ff.name)] = v
		want[ff.name] = v
	}
	if envName("ip-masq-fully-random-disable") != "FLANNELD_IP_MASQ_FULLY_RANDOM_DISABLE" || envName("log_backtrace_at") != "FLANNELD_LOG_BACKTRACE_AT" {
		t.Fatalf("envName: %s, %s", envName("ip-masq-fully-random-disable"), envName("log_backtrace_at"))
	}
	f, err := parseFlagsEnv(nil, io.Discard, func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	flagValues(f, func(name, v string) { got[name] = v })
	for name, v := range want {
		if got[name] != v {
			t.Errorf("FLANNELD_%s=%s: --%s is %q", strings.ToUpper(strings.ReplaceAll(name, "-", "_")), v, name, got[name])
		}
		if !f.set[name] {
			t.Errorf("--%s from the environment is not marked as given", name)
		}
	}

	// The command line wins; an empty variable leaves the default.
	f, err = parseFlagsEnv([]string{"--iface", "eth9", "--ip-masq=false"}, io.Discard, func(k string) string {
		return map[string]string{"FLANNELD_IFACE": "eth1", "FLANNELD_IP_MASQ": "true", "FLANNELD_SUBNET_FILE": ""}[k]
	})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(f.iface, []string{"eth9"}) || f.ipMasq || f.subnetFile != "/run/flannel/subnet.env" {
		t.Errorf("command line vs environment: iface %v ip-masq %t subnet-file %s", f.iface, f.ipMasq, f.subnetFile)
	}

	// A value the flag cannot take names the variable.
	_, err = parseFlagsEnv(nil, io.Discard, func(k string) string {
		return map[string]string{"FLANNELD_IPTABLES_RESYNC": "soon"}[k]
	})
	if err == nil || !strings.Contains(err.Error(), "$FLANNELD_IPTABLES_RESYNC") {
		t.Errorf("FLANNELD_IPTABLES_RESYNC=soon: err %v, want one naming the variable", err)
	}
}

// flagValues calls fn with each flag's current value of f, by name.
func flagValues(f *flags, fn func(name, v string)) {
	for _, s := range f.stringFlags() {
		fn(s.name, *s.p)
	}
	for _, b := range f.boolFlags() {
		fn(b.name, strconv.FormatBool(*b.p))
	}
	for _, i := range f.intFlags() {
		fn(i.name, strconv.Itoa(*i.p))
	}
	fn("iface", f.iface.String())
	fn("iface-regex", f.ifaceRegex.String())
}

// TestFlannelEnvVars: flanneld's other variables.
func TestFlannelEnvVars(t *testing.T) {
	for _, tc := range []struct {
		env   map[string]string
		depth int
		cont  bool
		err   string
	}{
		{nil, 5000, false, ""},
		{map[string]string{"EVENT_QUEUE_DEPTH": "5000", "CONT_WHEN_CACHE_NOT_READY": "false"}, 5000, false, ""}, // kube-flannel.yml's
		{map[string]string{"EVENT_QUEUE_DEPTH": "100", "CONT_WHEN_CACHE_NOT_READY": "true"}, 100, true, ""},
		{map[string]string{"EVENT_QUEUE_DEPTH": "0"}, 5000, false, ""},  // not > 0: flanneld's default
		{map[string]string{"EVENT_QUEUE_DEPTH": "-3"}, 5000, false, ""}, // the same
		{map[string]string{"CONT_WHEN_CACHE_NOT_READY": "TRUE"}, 5000, false, ""},
		{map[string]string{"EVENT_QUEUE_DEPTH": "many"}, 0, false, "$EVENT_QUEUE_DEPTH"},
	} {
		e, err := readFlannelEnv(func(k string) string { return tc.env[k] })
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%v: err %v, want one naming %s", tc.env, err, tc.err)
			}
			continue
		}
		if err != nil || e.eventQueueDepth != tc.depth || e.contWhenCacheNotReady != tc.cont {
			t.Errorf("%v: %+v, %v; want depth %d cont %t", tc.env, e, err, tc.depth, tc.cont)
		}
	}
	e, _ := readFlannelEnv(func(k string) string {
		return map[string]string{"POD_NAME": "kube-flannel-ds-x", "POD_NAMESPACE": "kube-flannel"}[k]
	})
	if ns, name, ok := e.podRef(); !ok || ns != "kube-flannel" || name != "kube-flannel-ds-x" {
		t.Errorf("podRef = %s %s %t", ns, name, ok)
	}
	if _, _, ok := (flannelEnv{podName: "p"}).podRef(); ok {
		t.Error("podRef without POD_NAMESPACE reported a pod")
	}
	if n := nodeName("", flannelEnv{nodeName: "n1", podName: "p", podNamespace: "ns"}); n != "n1" {
		t.Errorf("nodeName with $NODE_NAME = %s", n)
	}
	if n := nodeName("flag", flannelEnv{nodeName: "n1"}); n != "flag" {
		t.Errorf("nodeName with --node-name = %s", n)
	}
}
