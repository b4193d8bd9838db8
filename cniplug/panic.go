package cniplug

import (
	"runtime/debug"

	"github.com/containernetworking/cni/pkg/types"
)

// CodeInternal is the code of an answer to a call that panicked: a bug in
// cnibox, never the caller's input. It is the spec's "internal error" (999).
const CodeInternal uint = types.ErrInternal

// panicValue is a recovered panic with the stack where it happened, kept
// while undo steps run and the panic goes on to Main.
type panicValue struct {
	value any
	stack []byte
}

func asPanic(r any) *panicValue {
	if p, ok := r.(*panicValue); ok {
		return p
	}
	return &panicValue{value: r, stack: debug.Stack()}
}

// recoverCall turns a panic of the call into an error with CodeInternal and
// writes its stack trace to log (stderr: the runtime keeps it; stdout is the
// CNI answer's). Use it deferred, with the call's error.
func recoverCall(err *error, log func(format string, args ...any)) {
	r := recover()
	if r == nil {
		return
	}
	p := asPanic(r)
	log("cnibox: panic: %v\n%s", p.value, p.stack)
	*err = Errorf(CodeInternal, "internal error (a bug in cnibox; the stack trace is on stderr and in the log): %v", p.value)
}

// Finish ends an ADD's undo stack, deferred with the ADD's error: it undoes
// every recorded step, newest first, when the ADD failed or panicked (the
// panic then goes on), and does nothing after Discard.
func (u *Undo) Finish(err *error) {
	if r := recover(); r != nil {
		p := asPanic(r)
		u.Run()
		panic(p)
	}
	if *err != nil {
		u.Run()
	}
}

