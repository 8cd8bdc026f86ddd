package procgroup

import (
	"bytes"
	"context"
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
