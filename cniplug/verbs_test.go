package cniplug

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
)

// TestVerbs: a ConfVerbs verb gets the config its parse gives (ParseGC,
// ParseStatus and ParseDel where set, else Parse), a parse error is the
// answer (DEL goes on without the field it names: ParseForDel, with its
// own parse too), and a verb left nil succeeds without parsing.
func TestVerbs(t *testing.T) {
	var log []string
	parseErr := Errorf(types.ErrInvalidNetworkConfig, "config field \"x\": bad")
	parser := func(name string) func(a *Args) (string, error) {
		return func(a *Args) (string, error) {
			log = append(log, name)
			if strings.Contains(string(a.StdinData), `"x":"bad"`) {
				return "", parseErr
			}
			return name + " " + a.Conf.Name, nil
		}
	}
	verb := func(name string) func(context.Context, *Args, string) error {
		return func(_ context.Context, _ *Args, c string) error { log = append(log, name+"("+c+")"); return nil }
	}
	role := &Role{
		Name: "verbs",
		Verbs: &ConfVerbs[string]{Parse: parser("parse"), ParseGC: parser("parseGC"), ParseStatus: Unparsed[string],
			Check: verb("check"), Del: verb("del"), GC: verb("gc"), Status: verb("status"),
			Add: func(_ context.Context, _ *Args, c string) (types.Result, error) {
				log = append(log, "add("+c+")")
				return &current.Result{CNIVersion: current.ImplementedSpecVersion}, nil
			}},
	}
	conf := `{"cniVersion":"1.1.0","name":"n","type":"verbs"}`
	bad := `{"cniVersion":"1.1.0","name":"n","x":"bad"}`
	for _, tc := range []struct {
		cmd, stdin string
		want       string
		err        error
	}{
		{"ADD", conf, "parse,add(parse n)", nil},
		{"CHECK", conf, "parse,check(parse n)", nil},
		{"DEL", conf, "parse,del(parse n)", nil},
		{"GC", conf, "parseGC,gc(parseGC n)", nil},
		{"STATUS", bad, "status()", nil}, // Unparsed reads nothing
		{"CHECK", bad, "parse", parseErr},
		{"GC", bad, "parseGC", parseErr},
		// DEL goes on without the refused field (ParseForDel)
		{"DEL", bad, "parse,parse,del(parse n)", nil},
	} {
		log = nil
		_, err := call1(t, role, map[string]string{"CNI_COMMAND": tc.cmd}, tc.stdin)
		if !errors.Is(err, tc.err) {
			t.Errorf("%s: error %v, want %v", tc.cmd, err, tc.err)
		}
		if got := strings.Join(log, ","); got != tc.want {
			t.Errorf("%s ran %q, want %q", tc.cmd, got, tc.want)
		}
	}

	// A verb left nil succeeds without parsing; ParseDel is DEL's parse.
	log = nil
	role.Verbs = &ConfVerbs[string]{Parse: parser("parse"), ParseDel: parser("parseDel"), Del: verb("del")}
	for _, cmd := range []string{"CHECK", "GC", "STATUS", "DEL"} {
		if _, err := call1(t, role, map[string]string{"CNI_COMMAND": cmd}, conf); err != nil {
			t.Errorf("%s: %v", cmd, err)
		}
	}
	if _, err := call1(t, role, map[string]string{"CNI_COMMAND": "ADD"}, conf); err == nil {
		t.Error("ADD without Add: no error, want the missing result's")
	}
	if got, want := strings.Join(log, ","), "parseDel,del(parseDel n)"; got != want {
		t.Errorf("ran %q, want %q", got, want)
	}
}

// TestRegistryNeedsVerbs: a role without Verbs cannot register.
func TestRegistryNeedsVerbs(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("NewRegistry took a role without Verbs")
		}
	}()
	NewRegistry(&Role{Name: "empty"})
}

// TestVerbDepth: a role's verb runs right under ConfVerbs.Run, which run
// calls: no adapter layer between cniplug and the role (issue 61: a bridge
// ADD went through four, each only forwarding).
func TestVerbDepth(t *testing.T) {
	var chain []string
	role := &Role{Name: "depth", Verbs: &ConfVerbs[NoConf]{Add: func(context.Context, *Args, NoConf) (types.Result, error) {
		pcs := make([]uintptr, 64)
		frames := runtime.CallersFrames(pcs[:runtime.Callers(2, pcs)]) // from this verb's caller out
		for {
			f, more := frames.Next()
			chain = append(chain, strings.TrimPrefix(f.Function, "github.com/cnibox/cnibox/cniplug."))
			if !more || strings.HasSuffix(f.Function, "cniplug.Invoke") {
				break
			}
		}
		return &current.Result{CNIVersion: current.ImplementedSpecVersion}, nil
	}}}
	if _, err := call1(t, role, map[string]string{"CNI_COMMAND": "ADD"}, `{"cniVersion":"1.1.0","name":"n","type":"depth"}`); err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(chain, " <- "), "(*ConfVerbs[...]).Run <- run <- Invoke"; got != want {
		t.Errorf("the role's ADD is called by %s, want %s", got, want)
	}
}
