package procwatch

import (
	"context"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	"golang.org/x/sys/unix"

	"github.com/amphora-agent/amphora-agent/agent/testkit"
)

// fakeHealth is a Spec.Healthy whose every answer the test gives.
type fakeHealth struct {
	answers chan bool
	stop    chan struct{}
}

func newFakeHealth(t *testing.T) *fakeHealth {
	f := &fakeHealth{answers: make(chan bool), stop: make(chan struct{})}
	t.Cleanup(func() { close(f.stop) })
	return f
}

// healthy waits for the test's answer, not for ctx: how long a question
// takes is the test's to say.
func (f *fakeHealth) healthy(ctx context.Context, pid int) bool {
	select {
	case ok := <-f.answers:
		return ok
	case <-f.stop:
		return false
	}
}

// answer gives the next answer, failing t when nothing asks in time.
func (f *fakeHealth) answer(t *testing.T, ok bool) {
	t.Helper()
	select {
	case f.answers <- ok:
	case <-time.After(10 * time.Second):
		t.Fatalf("nobody asked for the answer %v", ok)
	}
}

// A process the pid file names and whose command line is the daemon's is
// adopted whatever it answers (an HAProxy master too busy or stopped to
// answer still serves through its workers): the restore neither waits for
// its answer nor starts or kills anything. The question goes on in the
// background, at growing intervals; silence is logged, once as a warning
// and once more as an error after three minutes of it, and the answer
// that comes at last is logged too.
func TestRestoreAdoptsAProcessThatDoesNotAnswer(t *testing.T) {
	sc := newStrayScene(t)
	earlier := make(chan struct{})
	prev := NewDaemon(sc.spec, earlier)
	if err := prev.With(func(h *Held) error { return h.Start(context.Background()) }); err != nil {
		t.Fatal(err)
	}
	pid := prev.Pid()
	close(earlier) // that agent is gone; its process runs on

	health := newFakeHealth(t)
	core, logs := observer.New(zapcore.InfoLevel)
	var clock testkit.Delays
	spec := sc.spec
	spec.Log = zap.New(core)
	spec.Healthy = health.healthy
	spec.After = clock.After
	done := make(chan struct{})
	defer close(done)
	d := restoreWanted(t, spec, done)
	if d.Pid() != pid || len(sc.cmds) != 1 {
		t.Fatalf("restore: pid %d (the earlier process is %d), %d commands run: want the earlier process adopted",
			d.Pid(), pid, len(sc.cmds))
	}

	logged := func(level zapcore.Level, text string) int {
		return logs.Filter(func(e observer.LoggedEntry) bool {
			return e.Level == level && strings.Contains(e.Message, text)
		}).Len()
	}
	const silence = "does not answer"
	for range 7 {
		health.answer(t, false)
	}
	testkit.WaitFor(t, 10*time.Second, "the silence logged", func() bool { return logged(zapcore.ErrorLevel, silence) == 1 })
	health.answer(t, true)
	testkit.WaitFor(t, 10*time.Second, "the answer logged", func() bool { return logged(zapcore.InfoLevel, "answers now") == 1 })

	if n := logged(zapcore.WarnLevel, silence); n != 1 {
		t.Errorf("the silence was warned about %d times, want once", n)
	}
	s := time.Second
	if got, want := clock.Asked(), []time.Duration{5 * s, 10 * s, 20 * s, 40 * s, 60 * s, 60 * s, 60 * s}; !slices.Equal(got, want) {
		t.Errorf("paused %v between questions, want %v", got, want)
	}
	if got := sc.running(); len(got) != 1 || got[0] != pid || d.Pid() != pid {
		t.Fatalf("%v run, the daemon has %d: want the adopted %d alone", got, d.Pid(), pid)
	}
	if n := logs.FilterMessageSnippet("ending a").Len(); n != 0 {
		t.Errorf("%d processes ended", n)
	}
	// Unwanted first, as the kinds' stop does: the respawner starts a
	// wanted daemon again, and that start would write into the test's
	// folder while it is removed.
	d.With(func(h *Held) error {
		h.SetDesired(false)
		return h.Stop()
	})
	if got := sc.running(); len(got) != 0 {
		t.Errorf("%v run after the stop, want none", got)
	}
}

// A started process leads a session of its own: its process group is then
// never orphaned by the agent's exit, which would make the kernel send it
// SIGHUP and SIGCONT if a member were stopped (HAProxy's master reloads on
// SIGHUP). An agent restart must leave it as it is.
func TestStartedProcessLeadsItsOwnSession(t *testing.T) {
	var cmds []*exec.Cmd
	spec := sleeper(t, true, func() bool { return true }, &cmds)
	done := make(chan struct{})
	defer close(done)
	d := NewDaemon(spec, done)
	if err := d.With(func(h *Held) error { return h.Start(context.Background()) }); err != nil {
		t.Fatal(err)
	}
	defer d.With(func(h *Held) error { return h.Stop() })
	pid := d.Pid()
	sid, err := unix.Getsid(pid)
	if err != nil {
		t.Fatal(err)
	}
	pgid, err := unix.Getpgid(pid)
	if err != nil {
		t.Fatal(err)
	}
	if sid != pid || pgid != pid {
		t.Fatalf("process %d: session %d, process group %d; want its own", pid, sid, pgid)
	}
}
