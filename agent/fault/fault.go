// Package fault holds the typed errors that domain code returns and the API
// layer turns into the controller-visible status codes and JSON bodies. It
// imports nothing from net/http so every domain package may use it.
package fault

import (
	"errors"
	"fmt"
)

// Kind is the class of failure; the API maps each kind to one status code.
type Kind int

const (
	// KindInvalid is a request the agent refuses (400).
	KindInvalid Kind = iota + 1
	// KindNotFound is an object the agent does not have (404).
	KindNotFound
	// KindConflict is a request that clashes with existing state (409).
	KindConflict
	// KindInternal is a failure on the agent's side (500).
	KindInternal
)

// Error is a failure with the text the controller should see.
//
// Upstream answers in two shapes: handler-made bodies ({"message", "details"})
// and framework-made ones ({"error": "<code> <reason>: <text>", "http_code"}).
// Framework selects the second, with Message as the description.
type Error struct {
	Kind       Kind
	Message    string
	Details    string
	HasDetails bool
	Framework  bool
	// Cause is logged by the API layer but never sent to the client.
	Cause error
}

func (e *Error) Error() string {
	s := e.Message
	if e.HasDetails && e.Details != "" {
		s += ": " + e.Details
	}
	if e.Cause != nil {
		s += ": " + e.Cause.Error()
	}
	return s
}

func (e *Error) Unwrap() error { return e.Cause }

// Invalid is a 400 with a message and optional details.
func Invalid(message string, details ...string) *Error {
	return withDetails(&Error{Kind: KindInvalid, Message: message}, details)
}

// NotFound is a 404 with a message and optional details.
func NotFound(message string, details ...string) *Error {
	return withDetails(&Error{Kind: KindNotFound, Message: message}, details)
}

// Conflict is a 409 with a message and optional details.
func Conflict(message string, details ...string) *Error {
	return withDetails(&Error{Kind: KindConflict, Message: message}, details)
}

// Internal is a 500 with a message, the details the controller sees, and the
// underlying cause for the log.
func Internal(message, details string, cause error) *Error {
	return &Error{Kind: KindInternal, Message: message, Details: details, HasDetails: true, Cause: cause}
}

// BadRequest is a 400 in the framework shape, used where upstream aborts with
// a description (e.g. "Invalid subnet information").
func BadRequest(description string) *Error {
	return &Error{Kind: KindInvalid, Message: description, Framework: true}
}

// Internalf wraps an unexpected error as a framework-shaped 500.
func Internalf(format string, args ...any) *Error {
	return &Error{Kind: KindInternal, Framework: true, Cause: fmt.Errorf(format, args...)}
}

func withDetails(e *Error, details []string) *Error {
	if len(details) > 0 {
		e.Details, e.HasDetails = details[0], true
	}
	return e
}

// As returns the *Error inside err, if any.
func As(err error) (*Error, bool) {
	var fe *Error
	ok := errors.As(err, &fe)
	return fe, ok
}
