package sdnotify

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// recordingNotifier is the service manager's side of the protocol: it
// keeps every message, or fails with err.
type recordingNotifier struct {
	sent []string
	err  error
}

func (r *recordingNotifier) Notify(state string) error {
	if r.err != nil {
		return r.err
	}
	r.sent = append(r.sent, state)
	return nil
}

// take returns the messages since the last take, joined by " | ".
func (r *recordingNotifier) take() string {
	out := strings.Join(r.sent, " | ")
	r.sent = nil
	return out
}

func TestServiceManagerLifecycle(t *testing.T) {
	rec := &recordingNotifier{}
	m := NewManager(rec, zap.NewNop())
	m.Status("restoring load balancers")
	m.Ready("ready: 1 of 1 load balancers running")
	m.Stopping()
	// Late arrivals (a restore ending during shutdown) must not follow
	// STOPPING=1.
	m.Status("restoring keepalived")
	m.Ready("ready again")
	m.ping(func() error { return nil })
	want := "STATUS=restoring load balancers | READY=1\nSTATUS=ready: 1 of 1 load balancers running | " +
		"STOPPING=1\nSTATUS=stopping; HAProxy and keepalived keep running"
	if got := rec.take(); got != want {
		t.Fatalf("sent %q\nwant %q", got, want)
	}
}

// A failing check withholds pings and says why once; recovery puts the
// last status back and pings again.
func TestWatchdogPingsOnlyWhileLive(t *testing.T) {
	rec := &recordingNotifier{}
	m := NewManager(rec, zap.NewNop())
	m.Ready("ready: 0 of 0 load balancers running")
	rec.take()

	var liveErr error
	live := func() error { return liveErr }
	steps := []struct {
		err  error
		want string
	}{
		{nil, "WATCHDOG=1"},
		{errors.New("heartbeat loop stuck"), "STATUS=unhealthy: heartbeat loop stuck"},
		{errors.New("heartbeat loop stuck"), ""},
		{errors.New("the API server has stopped"), "STATUS=unhealthy: the API server has stopped"},
		{nil, "STATUS=ready: 0 of 0 load balancers running | WATCHDOG=1"},
		{nil, "WATCHDOG=1"},
	}
	for i, s := range steps {
		liveErr = s.err
		m.ping(live)
		if got := rec.take(); got != s.want {
			t.Errorf("step %d (%v): sent %q, want %q", i, s.err, got, s.want)
		}
	}
}

func TestStatusIsOneCappedLine(t *testing.T) {
	long := strings.Repeat("é", statusMax) // two bytes each
	tests := []struct{ in, want string }{
		{"restore failed: haproxy:\n[ALERT] bind\r\n\tfailed  ", "restore failed: haproxy: [ALERT] bind failed"},
		{long, strings.Repeat("é", statusMax/2) + "…"},
		{"x" + long, "x" + strings.Repeat("é", (statusMax-1)/2) + "…"},
	}
	for _, tt := range tests {
		if got := oneLine(tt.in); got != tt.want {
			t.Errorf("oneLine(%.20q...) = %.40q... (%d bytes), want %.40q...", tt.in, got, len(got), tt.want)
		}
	}
}

// A broken notify socket is logged once, not at every ping.
func TestNotifyErrorLoggedOnce(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	rec := &recordingNotifier{err: errors.New("connection refused")}
	m := NewManager(rec, zap.New(core))
	for range 3 {
		m.ping(func() error { return nil })
	}
	if n := logs.FilterMessage("cannot notify systemd").Len(); n != 1 {
		t.Fatalf("logged %d times, want once", n)
	}
}

func TestLivenessCheck(t *testing.T) {
	t0 := time.Now()
	const interval = 10 * time.Second
	tests := []struct {
		name      string
		apiEnded  bool
		started   time.Duration // heartbeat loop start, after t0; <0: not started
		lastCycle time.Duration // after t0; <0: no cycle yet
		now       time.Duration // after t0
		wantErr   string
	}{
		{name: "restoring the network, loop not begun", started: -1, lastCycle: -1, now: time.Hour},
		{name: "first cycle still running", started: 0, lastCycle: -1, now: interval + heartbeatStall},
		{name: "first cycle stuck", started: 0, lastCycle: -1, now: interval + heartbeatStall + time.Second,
			wantErr: "has not finished a cycle"},
		{name: "cycles on time", started: 0, lastCycle: time.Hour, now: time.Hour + interval},
		{name: "slow cycle", started: 0, lastCycle: time.Hour, now: time.Hour + interval + heartbeatStall},
		{name: "stuck", started: 0, lastCycle: time.Hour, now: time.Hour + interval + heartbeatStall + time.Second,
			wantErr: "has not finished a cycle"},
		{name: "API server gone", apiEnded: true, started: 0, lastCycle: time.Hour, now: time.Hour,
			wantErr: "API server has stopped"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := &Liveness{
				now:      func() time.Time { return t0.Add(tt.now) },
				interval: func() time.Duration { return interval },
				lastCycle: func() time.Time {
					if tt.lastCycle < 0 {
						return time.Time{}
					}
					return t0.Add(tt.lastCycle)
				},
			}
			l.apiEnded.Store(tt.apiEnded)
			if tt.started >= 0 {
				l.HeartbeatStarted(t0.Add(tt.started))
			}
			err := l.Check()
			if (err == nil) != (tt.wantErr == "") || (err != nil && !strings.Contains(err.Error(), tt.wantErr)) {
				t.Fatalf("Check() = %v, want error containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestReadyStatus(t *testing.T) {
	if got, want := ReadyStatus(0, 0, nil, nil), "ready: 0 of 0 load balancers running"; got != want {
		t.Errorf("empty: %q, want %q", got, want)
	}
	got := ReadyStatus(1, 2, errors.New("lb1: haproxy exited"), nil)
	if want := "ready: 1 of 2 load balancers running; restore failed: lb1: haproxy exited"; got != want {
		t.Errorf("failed restore: %q, want %q", got, want)
	}
	got = ReadyStatus(0, 0, nil, errors.New("reading /var/lib/octavia: permission denied"))
	if want := "ready: 0 of 0 load balancers running; restore failed: reading /var/lib/octavia: permission denied"; got != want {
		t.Errorf("uncountable: %q, want %q", got, want)
	}
}

// The real client: silent without NOTIFY_SOCKET, one datagram per
// message with it.
func TestSdNotifyClient(t *testing.T) {
	t.Setenv("NOTIFY_SOCKET", "")
	if err := (Systemd{}).Notify("READY=1"); err != nil {
		t.Fatalf("without NOTIFY_SOCKET: %v", err)
	}
	path := filepath.Join(t.TempDir(), "notify")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	t.Setenv("NOTIFY_SOCKET", path)
	for _, msg := range []string{"STATUS=one", "READY=1\nSTATUS=two"} {
		if err := (Systemd{}).Notify(msg); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 256)
		conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		n, err := conn.Read(buf)
		if err != nil || string(buf[:n]) != msg {
			t.Fatalf("read %q, %v; want %q", buf[:n], err, msg)
		}
	}
	if os.Getenv("NOTIFY_SOCKET") != path {
		t.Fatal("NOTIFY_SOCKET was removed from the environment; later messages would be lost")
	}
}
