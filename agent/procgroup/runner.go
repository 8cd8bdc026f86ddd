package procgroup

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os/exec"
	"syscall"
)

// Runner runs a command to completion: the one seam through which the
// agent runs short commands (haproxy -c, version lookups) and through
// which tests answer for them.
type Runner interface {
	// Output returns what the command wrote on stdout.
	Output(ctx context.Context, name string, args ...string) ([]byte, error)
	// CombinedOutput returns what it wrote on stdout and stderr together.
	CombinedOutput(ctx context.Context, name string, args ...string) ([]byte, error)
}

// Exec is the Runner of real commands, each in its own process group and
// ended with it when ctx ends. Env, when not nil, replaces the agent's
// environment.
type Exec struct{ Env []string }

func (e Exec) Output(ctx context.Context, name string, args ...string) ([]byte, error) {
	var out bytes.Buffer
	cmd := Command(ctx, name, args...)
	cmd.Env = e.Env
	cmd.Stdout = &out
	err := Run(cmd, nil)
	return out.Bytes(), err
}

func (e Exec) CombinedOutput(ctx context.Context, name string, args ...string) ([]byte, error) {
	cmd := Command(ctx, name, args...)
	cmd.Env = e.Env
	return CombinedOutput(cmd, nil)
}

// NotRun reports whether err, from running a command, says the command
// gave no verdict of its own: it could not be started (a missing or
// non-executable binary, a namespace it cannot enter), or a signal ended
// it (a kill when its context ended, a crash). An exit status is the
// command's own answer.
func NotRun(err error) bool {
	var (
		ee    *exec.ExitError
		xe    *exec.Error
		pe    *fs.PathError
		errno syscall.Errno
	)
	switch {
	case errors.As(err, &ee):
		return ee.ExitCode() < 0
	case errors.As(err, &xe), errors.As(err, &pe), errors.As(err, &errno):
		return true
	}
	return false
}
