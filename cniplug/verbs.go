package cniplug

import (
	"context"

	"github.com/containernetworking/cni/pkg/types"
)

// Verbs answers a role's verbs from one value (see Role.Verbs): a role's
// Verbs is the address of a package-level composite literal, such as a
// ConfVerbs, so that its Role stays data.
type Verbs interface {
	// Run answers the call's verb (a.Command); the result counts for ADD
	// only.
	Run(ctx context.Context, a *Args) (types.Result, error)
}

// ConfVerbs are the verbs of a role that works on its parsed config: Parse
// runs first and its error (a coded config error) is the call's answer, then
// the verb gets the config. A nil verb succeeds without parsing.
type ConfVerbs[C any] struct {
	Parse  func(*Args) (C, error)
	Add    func(context.Context, *Args, C) (types.Result, error)
	Check  func(context.Context, *Args, C) error
	Del    func(context.Context, *Args, C) error
	GC     func(context.Context, *Args, C) error
	Status func(context.Context, *Args, C) error
}

// Run answers the call's verb with v's function for it.
func (v *ConfVerbs[C]) Run(ctx context.Context, a *Args) (types.Result, error) {
	if a.Command == "ADD" {
		if v.Add == nil {
			return nil, nil
		}
		return AddWithConf(ctx, a, v.Parse, v.Add)
	}
	verb := Pick(a.Command, v.Check, v.Del, v.GC, v.Status)
	if verb == nil {
		return nil, nil
	}
	return nil, WithConf(ctx, a, v.Parse, verb)
}

// Pick returns the one of a role's CHECK, DEL, GC and STATUS that answers
// cmd (STATUS for any other: run checked cmd before).
func Pick[F any](cmd string, check, del, gc, status F) F {
	switch cmd {
	case "CHECK":
		return check
	case "DEL":
		return del
	case "GC":
		return gc
	}
	return status
}

// run answers the call's verb: with the role's function for it, else with
// Verbs.
func (r *Role) run(ctx context.Context, a *Args) (types.Result, error) {
	if a.Command == "ADD" {
		if r.Add != nil {
			return r.Add(ctx, a)
		}
	} else if verb := Pick(a.Command, r.Check, r.Del, r.GC, r.Status); verb != nil {
		return nil, verb(ctx, a)
	}
	if r.Verbs != nil {
		return r.Verbs.Run(ctx, a)
	}
	return nil, nil
}
