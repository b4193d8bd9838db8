package cniplug

import (
	"context"
	"errors"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
)

func TestWithConf(t *testing.T) {
	bad := Errorf(types.ErrInvalidNetworkConfig, "field \"x\": bad")
	parse := func(a *Args) (string, error) {
		if a.IfName == "" {
			return "", bad
		}
		return "conf of " + a.IfName, nil
	}
	var got string
	del := func(ctx context.Context, a *Args) error {
		return WithConf(ctx, a, parse, func(_ context.Context, _ *Args, c string) error { got = c; return nil })
	}
	if err := del(context.Background(), &Args{IfName: "eth0"}); err != nil || got != "conf of eth0" {
		t.Fatalf("verb got %q, err %v; want the parsed config", got, err)
	}
	got = ""
	if err := del(context.Background(), &Args{}); !errors.Is(err, bad) || got != "" {
		t.Fatalf("a parse error must be the answer and the verb must not run: err %v, verb saw %q", err, got)
	}
	add := func(_ context.Context, _ *Args, c string) (types.Result, error) { got = c; return nil, nil }
	if _, err := AddWithConf(context.Background(), &Args{}, parse, add); !errors.Is(err, bad) || got != "" {
		t.Fatalf("Add: a parse error must be the answer: err %v, verb saw %q", err, got)
	}
}
