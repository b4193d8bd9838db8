package cniplug

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
)

// TestVerbs: a Role's own function answers its verb, Verbs the rest; a
// ConfVerbs verb gets the parsed config, a parse error is the answer (DEL
// goes on without the field it names: ParseForDel), and a verb it leaves
// nil succeeds without parsing.
func TestVerbs(t *testing.T) {
	var log []string
	parseErr := Errorf(types.ErrInvalidNetworkConfig, "config field \"x\": bad")
	parse := func(a *Args) (string, error) {
		log = append(log, "parse")
		if strings.Contains(string(a.StdinData), `"x":"bad"`) {
			return "", parseErr
		}
		return a.Conf.Name, nil
	}
	verb := func(name string) func(context.Context, *Args, string) error {
		return func(_ context.Context, _ *Args, c string) error { log = append(log, name+" "+c); return nil }
	}
	role := &Role{
		Name: "verbs",
		Verbs: &ConfVerbs[string]{Parse: parse, Check: verb("check"), Del: verb("del"),
			Add: func(_ context.Context, _ *Args, c string) (types.Result, error) {
				log = append(log, "add "+c)
				return &current.Result{CNIVersion: current.ImplementedSpecVersion}, nil
			}},
		GC: func(context.Context, *Args) error { log = append(log, "own gc"); return nil },
	}
	conf := `{"cniVersion":"1.1.0","name":"n","type":"verbs"}`
	for _, tc := range []struct {
		cmd, stdin string
		want       string
		err        error
	}{
		{"ADD", conf, "parse,add n", nil},
		{"CHECK", conf, "parse,check n", nil},
		{"DEL", conf, "parse,del n", nil},
		{"GC", conf, "own gc", nil},
		{"STATUS", conf, "", nil},
		{"CHECK", `{"cniVersion":"1.1.0","name":"n","x":"bad"}`, "parse", parseErr},
		// DEL goes on without the refused field (ParseForDel)
		{"DEL", `{"cniVersion":"1.1.0","name":"n","x":"bad"}`, "parse,parse,del n", nil},
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
}

// TestRegistryNeedsAdd: a role with neither Add nor Verbs cannot register.
func TestRegistryNeedsAdd(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("NewRegistry took a role without Add or Verbs")
		}
	}()
	NewRegistry(&Role{Name: "empty"})
}
