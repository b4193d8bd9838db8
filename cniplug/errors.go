package cniplug

import (
	"errors"
	"fmt"
	"strings"

	"github.com/containernetworking/cni/pkg/types"
)

// Error codes used by cnibox beyond the spec's well-known ones (types.Err*).
// They are part of the documented interface: see the README's error table.
const (
	// CodeBusy: the store was busy past its timeout or the overlay is not ready; try again.
	CodeBusy uint = types.ErrTryAgainLater // 11
	// CodeNotReady is STATUS's "plugin not available".
	CodeNotReady uint = 50
	// CodePoolExhausted: every address of the pool is in use.
	CodePoolExhausted uint = 100
	// CodeIfaceExists: CNI_IFNAME already exists in the pod namespace.
	CodeIfaceExists uint = 101
	// CodeInternal: the call panicked, a bug in cnibox rather than anything in
	// the caller's input; the stack trace is on stderr and in the log. It is
	// the spec's "internal error" (999).
	CodeInternal uint = types.ErrInternal
)

// CodedError is an error that carries a CNI error code. It wraps its cause, so
// errors.Is/As see through it.
type CodedError struct {
	Code uint
	Msg  string
	Err  error
	// Field is the config path the error is about ("mtu",
	// "ipam.ranges[0][0].subnet"), when its message begins by naming one
	// (`config field "mtu": ...`, see Errorf); else "". A DEL reads it to
	// go on without that field (ParseForDel).
	Field string
}

func (e *CodedError) Error() string { return e.Msg }

// Unwrap returns the cause.
func (e *CodedError) Unwrap() error { return e.Err }

// Errorf returns an error with a CNI code. The message is formatted like
// fmt.Errorf, and a %w verb makes the wrapped error its cause. A format that
// begins by naming a config field, as every config error does
// (`config field %q: ...` with the path as the first argument, or the path
// written out: `config field "mode" ...`), gives the error its Field.
func Errorf(code uint, format string, args ...any) error {
	err := fmt.Errorf(format, args...)
	return &CodedError{Code: code, Msg: err.Error(), Err: errors.Unwrap(err), Field: fieldOf(format, args)}
}

// fieldOf is the config path that an error's format names at its start
// (see Errorf), or "".
func fieldOf(format string, args []any) string {
	rest, ok := strings.CutPrefix(format, "config field ")
	switch {
	case !ok:
		return ""
	case strings.HasPrefix(rest, "%q"):
		if len(args) > 0 {
			if s, ok := args[0].(string); ok {
				return s
			}
		}
	case strings.HasPrefix(rest, `"`):
		if path, _, ok := strings.Cut(rest[1:], `"`); ok {
			return path
		}
	}
	return ""
}

// WithCode gives err a CNI code unless it already carries one. nil stays nil.
func WithCode(code uint, err error) error {
	if err == nil {
		return nil
	}
	if _, ok := codeOf(err); ok {
		return err
	}
	return &CodedError{Code: code, Msg: err.Error(), Err: err}
}

// Coder is implemented by errors of lower packages (store, netops) that know
// their CNI code without importing this package.
type Coder interface{ CNICode() uint }

// codeOf returns the outermost code in err's chain.
func codeOf(err error) (uint, bool) {
	for e := err; e != nil; e = errors.Unwrap(e) {
		switch t := e.(type) {
		case *CodedError:
			return t.Code, true
		case *types.Error:
			return t.Code, true
		case Coder:
			return t.CNICode(), true
		}
	}
	return 0, false
}

// CodeOf reports the CNI code that err carries; an uncoded error counts as an
// I/O failure (5), since every validation path in cnibox codes its errors.
func CodeOf(err error) uint {
	if c, ok := codeOf(err); ok {
		return c
	}
	return types.ErrIOFailure
}

// AsTypesError converts err to the CNI library's error type, for printing: the
// code of the outermost coded error, the whole message chain, and the details of
// a delegate's error if there is one.
func AsTypesError(err error) *types.Error {
	var te *types.Error
	if errors.As(err, &te) && te == err {
		return te
	}
	out := &types.Error{Code: CodeOf(err), Msg: err.Error()}
	if te != nil {
		out.Details = te.Details
	}
	return out
}
