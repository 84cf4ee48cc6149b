// Package exit owns kubeboot's process exit codes: their values, defined
// once, and the error type of a usage mistake. An error that knows its code
// implements ExitCode() int; Code maps any error to its code.
package exit

import (
	"errors"
	"strconv"
)

// The exit codes, as docs/guide.md documents them.
const (
	// OK is a success.
	OK = 0
	// Failure is any error without a more specific code.
	Failure = 1
	// Usage is a mistake on the command line or in the configuration.
	Usage = 2
	// Rejected is a manifest the kubelet would reject.
	Rejected = 3
	// NotHealthy is a control plane (or a step of it) not healthy in time.
	NotHealthy = 4
)

// Code maps an error to its exit code: errors that know their code carry
// it; nil is OK and anything else is Failure.
func Code(err error) int {
	if err == nil {
		return OK
	}
	var coded interface{ ExitCode() int }
	if errors.As(err, &coded) {
		return coded.ExitCode()
	}
	return Failure
}

// UsageError is a mistake on the command line; it exits with Usage.
type UsageError struct {
	// Msg says what is wrong and how to fix it.
	Msg string
}

// Error returns the message.
func (e *UsageError) Error() string { return e.Msg }

// ExitCode is Usage.
func (e *UsageError) ExitCode() int { return Usage }

// TimeoutError is a step that did not finish in time; like an unhealthy
// control plane, it exits with NotHealthy.
type TimeoutError struct {
	// Msg says what did not happen in time, and where to look.
	Msg string
}

// Error returns the message.
func (e *TimeoutError) Error() string { return e.Msg }

// ExitCode is NotHealthy.
func (e *TimeoutError) ExitCode() int { return NotHealthy }

// CommandExit is the exit of a command that kubeboot ran as the user's
// own, such as `lab exec`'s: its code is kubeboot's, and the command has
// said what it had to on its own output, so kubeboot prints nothing more.
type CommandExit struct {
	// Code is the command's exit code.
	Code int
}

// Error says how the command exited.
func (e *CommandExit) Error() string { return "the command exited " + strconv.Itoa(e.Code) }

// ExitCode is the command's.
func (e *CommandExit) ExitCode() int { return e.Code }
