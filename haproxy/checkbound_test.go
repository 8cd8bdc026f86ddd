package haproxy

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/amphora-agent/amphora-agent/agent/caller"
	"github.com/amphora-agent/amphora-agent/agent/fault"
	"github.com/amphora-agent/amphora-agent/agent/procgroup"
)

// slowCheck is a `haproxy -c` that finds every config valid after took,
// unless its context ends first.
type slowCheck struct{ took time.Duration }

func (s slowCheck) CombinedOutput(ctx context.Context, _ string, _ ...string) ([]byte, error) {
	select {
	case <-time.After(s.took):
		return []byte("Configuration file is valid\n"), nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (s slowCheck) Output(ctx context.Context, name string, args ...string) ([]byte, error) {
	return s.CombinedOutput(ctx, name, args...)
}

// asUploaded is an upload's context as the agent hands it on: detached
// from the request, which it still records.
func asUploaded(req context.Context) context.Context {
	return context.WithoutCancel(caller.With(req))
}

// `haproxy -c` runs as long as it takes while the client waits (upstream
// sets no limit): 31 s, past the bound it once had, is no rejection. One
// the client stops waiting for is a 500 (it says nothing about the
// config) and keeps nothing as the failed config.
func TestCheckRunsAsLongAsTheClientWaits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st, _ := newTestStore(t)
		st.Runner = slowCheck{took: 31 * time.Second}
		body := []byte("frontend L1\n    mode http\n")
		if err := st.Upload(asUploaded(context.Background()), "AMP1", "lb1", body); err != nil {
			t.Fatalf("a check taking 31 s: %v", err)
		}

		st.Runner = slowCheck{took: time.Hour}
		req, leave := context.WithTimeout(context.Background(), 50*time.Second)
		defer leave()
		err := st.Upload(asUploaded(req), "AMP1", "lb1", []byte("frontend L2\n    mode http\n"))
		if fe, ok := fault.As(err); !ok || fe.Kind != fault.KindInternal || !strings.Contains(fe.Details, "did not finish") {
			t.Fatalf("a check its client stopped waiting for: %v", err)
		}
		if cfg, _ := st.Config("lb1"); string(cfg) != string(body) {
			t.Fatalf("stored config changed: %q", cfg)
		}
		if _, err := os.Stat(st.Layout.FailedPath("lb1")); err == nil {
			t.Fatal("a config never checked was kept as the failed one")
		}
	})
}

// A `haproxy -c` that cannot be run at all is a 500, not a rejection of
// the config.
func TestCheckThatCannotRunIsNoRejection(t *testing.T) {
	st, _ := newTestStore(t)
	st.Runner = procgroup.Exec{}
	st.HAProxyCmd = filepath.Join(t.TempDir(), "haproxy")
	if err := os.WriteFile(st.HAProxyCmd, []byte("#!/bin/sh\nexit 0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	err := st.Upload(context.Background(), "AMP1", "lb1", []byte("frontend L1\n    mode http\n"))
	if fe, ok := fault.As(err); !ok || fe.Kind != fault.KindInternal || !strings.Contains(fe.Details, "could not run") {
		t.Fatalf("a check that cannot run: %v", err)
	}
}
