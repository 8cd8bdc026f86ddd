package keepalived

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/amphora-agent/amphora-agent/agent/caller"
	"github.com/amphora-agent/amphora-agent/agent/pidfile"
	"github.com/amphora-agent/amphora-agent/agent/procwatch"
	"github.com/amphora-agent/amphora-agent/agent/testkit"
)

// askedEnv is slowEnv whose hold lifts after a second, well past its
// 300 ms StartWait, with the fail file made when fail is set.
func askedEnv(t *testing.T, fail bool) *fakeEnv {
	e, _, release := slowEnv(t)
	if fail {
		testkit.WriteFile(t, filepath.Join(e.dir, "fail"), "")
	}
	time.AfterFunc(time.Second, release)
	return e
}

// A start the controller asked for waits for keepalived's pid file as
// upstream's systemctl start of its Type=forking unit does: answered once
// keepalived runs, never followed in the background.
func TestAskedKeepalivedStartsWaitForThePidFile(t *testing.T) {
	ctx := caller.With(context.Background())
	t.Run("VRRP", func(t *testing.T) {
		v := askedEnv(t, false).vrrp(t)
		if err := v.Upload(ctx, []byte("global_defs {}\n")); err != nil {
			t.Fatal(err)
		}
		if _, err := v.Start(ctx); err != nil {
			t.Fatal(err)
		}
		if got, _ := pidfile.Read(v.Layout().PidPath()); got == 0 || got != v.Pid() || v.k.d.Starting() != nil {
			t.Fatalf("answered before keepalived was ready: pid file %d, pid %d", got, v.Pid())
		}
	})
	for _, restart := range []bool{false, true} {
		t.Run(map[bool]string{false: "LVS start", true: "LVS restart"}[restart], func(t *testing.T) {
			e, _, release := slowEnv(t)
			s := e.lvs(t)
			if err := s.Upload(ctx, "l1", []byte(lvsConf)); err != nil {
				t.Fatal(err)
			}
			op := s.Start
			if restart {
				release()
				if err := s.Start(ctx, "l1"); err != nil {
					t.Fatal(err)
				}
				testkit.WriteFile(t, filepath.Join(e.dir, "hold"), "")
				op = s.Restart
			}
			time.AfterFunc(time.Second, release)
			if err := op(ctx, "l1"); err != nil {
				t.Fatal(err)
			}
			if !s.Layout().Running("l1") || s.Busy("l1") {
				t.Fatal("answered before keepalived was ready")
			}
			if err := s.Stop(context.Background(), "l1"); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// One whose keepalived dies while the controller waits is a failure with
// keepalived's output (500), as upstream's failed systemctl start.
func TestAskedKeepalivedStartThatDiesFails(t *testing.T) {
	v := askedEnv(t, true).vrrp(t)
	ctx := caller.With(context.Background())
	if err := v.Upload(ctx, []byte("global_defs {}\n")); err != nil {
		t.Fatal(err)
	}
	_, err := v.Start(ctx)
	if err == nil || !strings.Contains(procwatch.Output(err), "failing after a slow start") {
		t.Fatalf("asked start that died: %v", err)
	}
	if err := v.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
}
