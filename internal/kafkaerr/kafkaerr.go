// Package kafkaerr carries a Kafka error code with a message through Go
// errors, from whatever layer decides it (the controller, the replica
// manager, a handler) to the response that reports it.
package kafkaerr

import (
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
)

// Error is a Kafka error code with the message a response carries.
type Error struct {
	Code *kerr.Error
	Msg  string
}

func (e *Error) Error() string { return e.Msg }

// Unwrap makes errors.Is(err, kerr.X) true for an Error of code X.
func (e *Error) Unwrap() error { return e.Code }

// New makes an Error of code with a formatted message.
func New(code *kerr.Error, format string, args ...any) *Error {
	return &Error{code, fmt.Sprintf(format, args...)}
}

// Code is the Kafka code err carries (an Error's, or a *kerr.Error
// wrapped anywhere in it), and whether it carries one.
func Code(err error) (int16, bool) {
	var e *Error
	if errors.As(err, &e) {
		return e.Code.Code, true
	}
	var ke *kerr.Error
	if errors.As(err, &ke) {
		return ke.Code, true
	}
	return 0, false
}
