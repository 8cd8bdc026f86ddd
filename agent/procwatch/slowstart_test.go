package procwatch

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/amphora-agent/amphora-agent/agent/testkit"
)

// gatedSpec is sleeper's daemon writing its pid file only once the
// returned open was called: its start is slow until the test says so.
func gatedSpec(t *testing.T, cmds *[]*exec.Cmd) (spec Spec, open func()) {
	spec = sleeper(t, false, func() bool { return true }, cmds)
	spec.StartTimeout = 200 * time.Millisecond
	gate := filepath.Join(filepath.Dir(spec.PidPath), "go")
	spec.Command = shell("n=0; while [ ! -e "+gate+" ] && [ $n -lt 600 ]; do sleep 0.05; n=$((n+1)); done; echo $$ > "+spec.PidPath+"; exec sleep 30", cmds)
	return spec, func() { os.WriteFile(gate, nil, 0o644) }
}

// A start answered before its process was ready goes on in the
// background: AwaitStart waits for it within its context only, and once
// it is ready OnReady runs, once, for that very process.
func TestSlowStartBecomesReady(t *testing.T) {
	var cmds []*exec.Cmd
	spec, open := gatedSpec(t, &cmds)
	var readied atomic.Int32
	var readyPid atomic.Int64
	spec.OnReady = func(p *Process) { readied.Add(1); readyPid.Store(int64(p.Pid)) }
	done := make(chan struct{})
	defer close(done)
	d := NewDaemon(spec, done)
	err := d.With(func(h *Held) error {
		if err := h.Start(context.Background()); err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		if err := h.AwaitStart(ctx); !errors.Is(err, ErrStillStarting) {
			t.Errorf("AwaitStart while the gate is shut: %v", err)
		}
		return nil
	})
	if err != nil || d.Starting() == nil {
		t.Fatalf("slow start: %v, starting %v", err, d.Starting() != nil)
	}
	pid := d.Pid()
	open()
	testkit.WaitFor(t, 20*time.Second, "the slow start ready", func() bool { return readied.Load() > 0 })
	if d.Starting() != nil || d.Pid() != pid || readyPid.Load() != int64(pid) {
		t.Fatalf("after ready: starting %v, pid %d→%d, OnReady for %d", d.Starting() != nil, pid, d.Pid(), readyPid.Load())
	}
	d.With(func(h *Held) error { return h.Stop() })
	if n := readied.Load(); n != 1 || len(cmds) != 1 {
		t.Fatalf("OnReady ran %d times, %d commands", n, len(cmds))
	}
}
