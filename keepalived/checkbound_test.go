package keepalived

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/amphora-agent/amphora-agent/agent/caller"
	"github.com/amphora-agent/amphora-agent/agent/fault"
)

// testedVRRP is the VRRP keepalived checking uploads with `keepalived -t`
// run by a stand-in for keepalived (script, made executable unless mode
// says otherwise), its warnings observed.
func testedVRRP(t *testing.T, script string, mode os.FileMode) (*VRRP, *observer.ObservedLogs) {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "keepalived")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\n"+script+"\n"), mode); err != nil {
		t.Fatal(err)
	}
	core, logs := observer.New(zap.WarnLevel)
	v := NewVRRP(VRRPOptions{Base: filepath.Join(dir, "lib"), Options: Options{Cmd: bin, Log: zap.New(core)}})
	t.Cleanup(v.Close)
	return v, logs
}

// asUploaded is an upload's context as the agent hands it on: detached
// from the request, which it still records.
func asUploaded(req context.Context) context.Context {
	return context.WithoutCancel(caller.With(req))
}

const vrrpBody = "global_defs {\n    router_id amp\n}\n"

// storedUnchecked fails t unless the upload succeeded, stored the config
// and warned that it was not checked.
func storedUnchecked(t *testing.T, v *VRRP, logs *observer.ObservedLogs, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("upload: %v", err)
	}
	if got, _ := os.ReadFile(v.Layout().ConfigPath()); string(got) != vrrpBody {
		t.Fatalf("stored %q", got)
	}
	if logs.FilterMessageSnippet("stored unchecked").Len() != 1 {
		t.Fatalf("no warning that the config went unchecked: %v", logs.All())
	}
}

// `keepalived -t` runs as long as the client waits: 16 s, past the bound
// it once had, is no rejection.
func TestKeepalivedTestRunsAsLongAsTheClientWaits(t *testing.T) {
	if testing.Short() {
		t.Skip("takes 16 s")
	}
	t.Parallel()
	v, _ := testedVRRP(t, "sleep 16", 0o755)
	if err := v.Upload(asUploaded(context.Background()), []byte(vrrpBody)); err != nil {
		t.Fatalf("a check taking 16 s: %v", err)
	}
}

// Upstream never runs `keepalived -t`: one the client stops waiting for,
// or one that cannot run at all, stores the config as upstream would,
// with a warning. Only keepalived's own verdict refuses one (400).
func TestKeepalivedTestWithoutAVerdictStores(t *testing.T) {
	t.Run("cut short", func(t *testing.T) {
		v, logs := testedVRRP(t, "sleep 30", 0o755)
		req, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		storedUnchecked(t, v, logs, v.Upload(asUploaded(req), []byte(vrrpBody)))
	})
	t.Run("cannot run", func(t *testing.T) {
		v, logs := testedVRRP(t, "exit 0", 0o644)
		storedUnchecked(t, v, logs, v.Upload(asUploaded(context.Background()), []byte(vrrpBody)))
	})
	t.Run("refused", func(t *testing.T) {
		v, _ := testedVRRP(t, "echo \"Extra '}' found\"; exit 5", 0o755)
		err := v.Upload(asUploaded(context.Background()), []byte(vrrpBody))
		if fe, ok := fault.As(err); !ok || fe.Kind != fault.KindInvalid {
			t.Fatalf("a config keepalived refuses: %v", err)
		}
	})
}
