package cniplug

import (
	"context"

	"github.com/containernetworking/cni/pkg/types"
)

// WithConf runs a verb that works on the role's parsed config: parse runs
// first and its error (a coded config error) is the call's answer; a DEL
// parses as ParseForDel says (a config ADD would refuse does not stop it).
// A role calls it from a named function of its own, which is what its
// Role's Check, Del, GC or Status names (see Role: no adapter is built at
// package level). ConfVerbs' DEL comes here too.
func WithConf[C any](ctx context.Context, a *Args, parse func(*Args) (C, error), verb func(context.Context, *Args, C) error) error {
	var c C
	var err error
	if a.Command == "DEL" {
		c, err = ParseForDel(a, parse)
	} else {
		c, err = parse(a)
	}
	if err != nil {
		return err
	}
	return verb(ctx, a, c)
}

// AddWithConf is WithConf for a Role's Add.
func AddWithConf[C any](ctx context.Context, a *Args, parse func(*Args) (C, error), add func(context.Context, *Args, C) (types.Result, error)) (types.Result, error) {
	c, err := parse(a)
	if err != nil {
		return nil, err
	}
	return add(ctx, a, c)
}
