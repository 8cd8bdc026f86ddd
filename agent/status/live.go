package status

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/amphora-agent/amphora-agent/agent/acceptretry"
)

// Live is what only the running agent knows; it sends it on the status
// socket and the status command merges it into what it read itself.
type Live struct {
	Pid         int                `json:"pid"`
	Version     string             `json:"version"`
	StartedAt   time.Time          `json:"started_at"`
	ConfigFiles []string           `json:"config_files"`
	Ready       bool               `json:"ready"`
	Log         string             `json:"log"`
	Daemons     map[string]History `json:"daemons"`  // keys: DaemonKey
	Reloads     map[string]Reload  `json:"reloads"`  // by load balancer
	Refusals    map[string]string  `json:"refusals"` // why a kept failed config was refused, by load balancer
	Heartbeat   Heartbeat          `json:"heartbeat"`
	// Goroutines is the agent's count when it answered: a leak of them
	// shows as a count that keeps rising (make soak watches it).
	Goroutines int `json:"goroutines"`
}

// History is a supervised daemon's record since the agent started.
type History struct {
	Respawns   int       `json:"respawns"`
	LastExit   string    `json:"last_exit,omitempty"`
	LastExitAt time.Time `json:"last_exit_at,omitzero"`
}

// DaemonKey names a daemon in Live.Daemons: "haproxy/<lb>", "vrrp" or
// "lvs/<listener>".
func DaemonKey(kind, id string) string {
	if id == "" {
		return kind
	}
	return kind + "/" + id
}

// Merge adds what the running agent told into r.
func Merge(r *Report, l *Live) {
	r.Agent.Running, r.Agent.State = true, AgentRunning
	r.Agent.Pid, r.Agent.Version, r.Agent.StartedAt = l.Pid, l.Version, l.StartedAt
	r.Agent.Ready, r.Agent.Log = l.Ready, l.Log
	r.Agent.Goroutines = l.Goroutines
	if len(l.ConfigFiles) > 0 {
		r.Agent.ConfigFiles = l.ConfigFiles
	}
	history := func(p *Process, key string) {
		h := l.Daemons[key]
		n := h.Respawns
		p.Respawns, p.LastExit, p.LastExitAt = &n, h.LastExit, h.LastExitAt
	}
	for i := range r.LoadBalancers {
		lb := &r.LoadBalancers[i]
		history(&lb.Process, DaemonKey("haproxy", lb.ID))
		if rl, ok := l.Reloads[lb.ID]; ok {
			lb.LastReload = &rl
		}
		if why, ok := l.Refusals[lb.ID]; ok && lb.FailedConfig != nil {
			lb.FailedConfig.Why = why
		}
	}
	if r.VRRP != nil {
		history(&r.VRRP.Process, DaemonKey("vrrp", ""))
	}
	for i := range r.LVSListeners {
		history(&r.LVSListeners[i].Process, DaemonKey("lvs", r.LVSListeners[i].ID))
	}
	hb := l.Heartbeat
	hb.Destinations, hb.IntervalSec = r.Heartbeat.Destinations, r.Heartbeat.IntervalSec
	r.Heartbeat = hb
}

// NotLive records in r why asking the agent failed (Fetch's error) and
// what it therefore cannot know. Only a missing socket, or one nothing
// listens on (left by a killed agent), means the agent is not running; a
// socket this user may not open, or an agent that does not answer in
// time, leaves its state unknown.
func NotLive(r *Report, err error) {
	r.Agent.State, r.Agent.StateReason = AgentUnknown, err.Error()
	switch {
	case errors.Is(err, fs.ErrNotExist):
		r.Agent.State, r.Agent.StateReason = AgentNotRunning, "no socket: the agent is not running"
	case errors.Is(err, syscall.ECONNREFUSED):
		r.Agent.State, r.Agent.StateReason = AgentNotRunning, "nothing listens on the socket: the agent is not running"
	case errors.Is(err, fs.ErrPermission), errors.Is(err, ErrRefused):
		r.Agent.StateReason = "permission denied, only root may ask it"
	case errors.Is(err, os.ErrDeadlineExceeded), errors.Is(err, context.DeadlineExceeded):
		r.Agent.StateReason = reasonNoAnswer
	}
	r.Unknown = append([]string{"the agent did not answer on " + r.Agent.Socket + " (" + r.Agent.StateReason +
		"): restarts, last reloads, readiness and heartbeats are not known"}, r.Unknown...)
}

// reasonNoAnswer is the state reason of an agent that accepted the
// connection but did not answer: something listens, so it runs, stuck.
const reasonNoAnswer = "no answer in time, the agent may be stuck"

// ErrRefused: the agent closed the connection without an answer, which it
// does to a peer that is neither root nor its own user.
var ErrRefused = errors.New("the agent closed the connection without an answer")

// Socket is the status socket, bound and in place under its name.
type Socket struct {
	ln   *net.UnixListener
	path string
}

// Listen binds the status socket at path. It is 0600 from the start
// (bound under a temporary name, then renamed into place), and it is
// there once Listen returns: the agent binds it before its API answers,
// so `amphora-agent status` finds it as soon as the controller could.
func Listen(path string) (*Socket, error) {
	ln, err := listen(path)
	if err != nil {
		return nil, err
	}
	return &Socket{ln: ln, path: path}, nil
}

// Serve answers every connection with the JSON of live() and closes it,
// until ctx ends; then the socket goes. A peer that is neither root nor
// this process's user is refused, so that only root reads it; it carries
// nothing but this one answer, and nothing is listening on the network.
// A failed accept (out of file descriptors) is tried again after a wait,
// of which retrying is told; only ctx ends the server, so the socket
// stays while the agent runs.
func (s *Socket) Serve(ctx context.Context, live func() Live, retrying func(err error, wait time.Duration)) error {
	return serve(ctx, s.ln, s.path, live, retrying)
}

func serve(ctx context.Context, ln net.Listener, path string, live func() Live, retrying func(error, time.Duration)) error {
	retried := acceptretry.Wrap(ln, retrying)
	go func() { <-ctx.Done(); retried.Close() }()
	defer os.Remove(path)
	for {
		conn, err := retried.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		go answer(conn.(*net.UnixConn), live)
	}
}

func listen(path string) (*net.UnixListener, error) {
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".new")
	os.Remove(tmp)
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: tmp, Net: "unix"})
	if err != nil {
		return nil, err
	}
	// The listener must not unlink the temporary name (renamed below) on
	// close; Serve removes the socket itself.
	ln.SetUnlinkOnClose(false)
	if err := os.Chmod(tmp, 0o600); err != nil {
		ln.Close()
		os.Remove(tmp)
		return nil, err
	}
	if err := os.Rename(tmp, path); err != nil {
		ln.Close()
		os.Remove(tmp)
		return nil, err
	}
	return ln, nil
}

func answer(conn *net.UnixConn, live func() Live) {
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	if !trusted(conn) {
		return
	}
	json.NewEncoder(conn).Encode(live())
}

// trusted reports whether the peer is root or this process's own user.
func trusted(conn *net.UnixConn) bool {
	raw, err := conn.SyscallConn()
	if err != nil {
		return false
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil || cerr != nil {
		return false
	}
	return cred.Uid == 0 || int(cred.Uid) == os.Geteuid()
}

// Fetch asks the agent listening at path for its live state.
func Fetch(ctx context.Context, path string) (*Live, error) {
	var d net.Dialer
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	conn, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		conn.SetDeadline(dl)
	}
	data, err := io.ReadAll(io.LimitReader(conn, 16<<20))
	if err != nil {
		return nil, err
	}
	if len(data) == 0 {
		return nil, ErrRefused
	}
	var l Live
	if err := json.Unmarshal(data, &l); err != nil {
		return nil, fmt.Errorf("unreadable answer: %w", err)
	}
	return &l, nil
}
