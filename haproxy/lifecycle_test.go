package haproxy

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/amphora-agent/amphora-agent/agent/fault"
	"github.com/amphora-agent/amphora-agent/haproxy/stats/haproxytest"
)

func masters(t *testing.T, st *Store) int {
	return haproxytest.Masters(st.Layout.MasterSocketPath("lb1"))
}

func cancelled() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}

// A request whose context is already cancelled (the controller gave up
// before the agent got to it) still starts and reloads completely: no
// rollback, no kill, exactly one master on the new config.
func TestLifecycleIgnoresCancelledRequest(t *testing.T) {
	sup, st, port := realSupervisor(t)
	if err := st.Upload(context.Background(), "AMP1", "lb1", testConfig(st, port, "gen1")); err != nil {
		t.Fatal(err)
	}
	if err := sup.Start(cancelled(), "lb1"); err != nil {
		t.Fatalf("start with a cancelled context: %v", err)
	}
	waitAnswer(t, port, "gen1")
	if err := st.Upload(context.Background(), "AMP1", "lb1", testConfig(st, port, "gen2")); err != nil {
		t.Fatal(err)
	}
	if _, err := sup.Reload(cancelled(), "lb1"); err != nil {
		t.Fatalf("reload with a cancelled context: %v", err)
	}
	waitAnswer(t, port, "gen2")
	if n := masters(t, st); n != 1 || !sup.Running("lb1") {
		t.Fatalf("%d masters, supervised %v; want exactly one", n, sup.Running("lb1"))
	}
	if _, err := os.Stat(st.Layout.FailedPath("lb1")); !os.IsNotExist(err) {
		t.Fatalf("a valid config was recorded as failed: %v", err)
	}
}

// A client that hangs up in the middle of a reload or a start changes
// nothing: the step completes.
func TestLifecycleOutlivesClientThatHangsUp(t *testing.T) {
	sup, st, port := realSupervisor(t)
	if err := st.Upload(context.Background(), "AMP1", "lb1", testConfig(st, port, "gen1")); err != nil {
		t.Fatal(err)
	}
	hangUp := func() context.Context {
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(30*time.Millisecond, cancel)
		return ctx
	}
	if err := sup.Start(hangUp(), "lb1"); err != nil {
		t.Fatalf("start: %v", err)
	}
	waitAnswer(t, port, "gen1")
	for _, gen := range []string{"gen2", "gen3"} {
		if err := st.Upload(context.Background(), "AMP1", "lb1", testConfig(st, port, gen)); err != nil {
			t.Fatal(err)
		}
		if _, err := sup.Reload(hangUp(), "lb1"); err != nil {
			t.Fatalf("reload to %s: %v", gen, err)
		}
		waitAnswer(t, port, gen)
	}
	if n := masters(t, st); n != 1 {
		t.Fatalf("%d masters, want 1", n)
	}
}

// A start that fails while the load balancer should run is answered with
// HAProxy's words and then retried until it works: the LB is never left
// down without supervision.
func TestFailedStartIsRetried(t *testing.T) {
	sup, st, port := realSupervisor(t)
	// Someone else holds the port: HAProxy cannot bind.
	squatter, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		t.Fatal(err)
	}
	defer squatter.Close()
	if err := st.Upload(context.Background(), "AMP1", "lb1", testConfig(st, port, "gen1")); err != nil {
		t.Fatal(err)
	}
	err = sup.Start(context.Background(), "lb1")
	fe, ok := fault.As(err)
	if !ok || fe.Message != "Error starting haproxy" || !strings.Contains(fe.Details, "cannot bind") {
		t.Fatalf("start on a taken port: %v", err)
	}
	if st2, _ := st.ReadState("lb1"); !st2.Running {
		t.Fatal("the desired state is not running after a failed start")
	}
	squatter.Close()
	waitAnswer(t, port, "gen1")
	if n := masters(t, st); n != 1 {
		t.Fatalf("%d masters after the retry, want 1", n)
	}
	// A stop ends the retrying for good.
	if err := sup.Stop(context.Background(), "lb1"); err != nil {
		t.Fatal(err)
	}
	if masters(t, st) != 0 {
		t.Fatal("HAProxy runs after stop")
	}
	if _, err := os.Stat(filepath.Join(st.Layout.Dir("lb1"), "haproxy.log")); err != nil {
		t.Fatalf("no output file: %v", err)
	}
}
