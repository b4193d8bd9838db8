package cniplug

import (
	"errors"
	"fmt"
	"runtime/debug"
)

// panicValue is a recovered panic with the stack where it happened, kept
// while undo steps run and the panic goes on to Main.
type panicValue struct {
	value any
	stack []byte
}

func (p *panicValue) Error() string { return fmt.Sprintf("panic: %v", p.value) }

// panicStack returns the stack trace of the panic err answers, "" when err
// is no panic.
func panicStack(err error) string {
	var p *panicValue
	if errors.As(err, &p) {
		return string(p.stack)
	}
	return ""
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
	*err = &CodedError{Code: CodeInternal, Err: p,
		Msg: fmt.Sprintf("internal error (a bug in cnibox; the stack trace is on stderr and in the log): %v", p.value)}
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
