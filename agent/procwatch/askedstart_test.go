package procwatch

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/amphora-agent/amphora-agent/agent/caller"
	"github.com/amphora-agent/amphora-agent/agent/testkit"
)

// slowSpec is a daemon whose start first runs pre (a wrapper's slowness),
// then writes its pid file and sleeps; StartTimeout is short against it.
func slowSpec(t *testing.T, pre string, cmds *[]*exec.Cmd) Spec {
	spec := sleeper(t, false, func() bool { return true }, cmds)
	spec.StartTimeout = 100 * time.Millisecond
	spec.Command = shell(pre+"; echo $$ > "+spec.PidPath+"; exec sleep 30", cmds)
	return spec
}

// asked is a start's context as the API hands it on: detached from the
// client's request, which it still records.
func asked(req context.Context) context.Context {
	return context.WithoutCancel(caller.With(req))
}

// A start a client asked for is answered once the process is ready, even
// well past StartTimeout (upstream's systemctl start blocks up to 90 s):
// never followed in the background, never answered before it runs.
func TestAskedStartWaitsPastStartTimeout(t *testing.T) {
	var cmds []*exec.Cmd
	spec := slowSpec(t, "sleep 1", &cmds)
	done := make(chan struct{})
	defer close(done)
	d := NewDaemon(spec, done)
	err := d.With(func(h *Held) error { return h.Start(asked(context.Background())) })
	if err != nil {
		t.Fatalf("asked start: %v", err)
	}
	if d.Starting() != nil || d.Pid() == 0 {
		t.Fatalf("asked start answered before ready: starting %v, pid %d", d.Starting() != nil, d.Pid())
	}
	d.With(func(h *Held) error { return h.Stop() })
}

// One that dies while the client waits, past StartTimeout, is a failure
// with its output, as upstream's systemctl start fails.
func TestAskedStartThatDiesFails(t *testing.T) {
	var cmds []*exec.Cmd
	spec := slowSpec(t, "sleep 1; echo cannot load; exit 3", &cmds)
	done := make(chan struct{})
	defer close(done)
	d := NewDaemon(spec, done)
	err := d.With(func(h *Held) error { return h.Start(asked(context.Background())) })
	if err == nil || !strings.Contains(Output(err), "cannot load") {
		t.Fatalf("asked start that died: %v (output %q)", err, Output(err))
	}
	if d.Starting() != nil || d.Pid() != 0 {
		t.Fatal("a start that died is still followed")
	}
}

// When the client goes away, or AskedStartTimeout passes, the start is
// answered and followed in the background as any other slow start.
func TestAskedStartEndsWithItsClientOrItsBound(t *testing.T) {
	for _, c := range []struct {
		name  string
		bound time.Duration
		leave bool
	}{
		{"the client leaves", time.Hour, true},
		{"the bound passes", 300 * time.Millisecond, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			var cmds []*exec.Cmd
			spec := slowSpec(t, "", &cmds)
			gate := filepath.Join(filepath.Dir(spec.PidPath), "go")
			spec.Command = shell("n=0; while [ ! -e "+gate+" ] && [ $n -lt 600 ]; do sleep 0.05; n=$((n+1)); done; echo $$ > "+spec.PidPath+"; exec sleep 30", &cmds)
			spec.AskedStartTimeout = c.bound
			readied := make(chan struct{}, 1)
			spec.OnReady = func(*Process) { readied <- struct{}{} }
			done := make(chan struct{})
			defer close(done)
			d := NewDaemon(spec, done)
			req, leave := context.WithCancel(context.Background())
			defer leave()
			if c.leave {
				time.AfterFunc(300*time.Millisecond, leave)
			}
			err := d.With(func(h *Held) error { return h.Start(asked(req)) })
			if err != nil || d.Starting() == nil {
				t.Fatalf("start: %v, followed %v", err, d.Starting() != nil)
			}
			testkit.WriteFile(t, gate, "")
			select {
			case <-readied:
			case <-time.After(20 * time.Second):
				t.Fatal("the start followed in the background never became ready")
			}
			d.With(func(h *Held) error { return h.Stop() })
		})
	}
}
