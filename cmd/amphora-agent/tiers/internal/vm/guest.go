package vm

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"time"
)

func (v *VM) guest() (*jsonConn, error) {
	v.mu.Lock()
	qga := v.qga
	v.mu.Unlock()
	if qga != nil {
		return qga, nil
	}
	qga, err := dialJSON(v.path("qga.sock"), 2*time.Second)
	if err != nil {
		return nil, err
	}
	// The guest agent may have half-read input from an earlier client:
	// a sync with a fresh id resynchronizes the stream.
	id := time.Now().UnixNano() & 0x7fffffff
	qga.conn.SetDeadline(time.Now().Add(3 * time.Second))
	if err := qga.send("guest-sync", map[string]any{"id": id}); err != nil {
		qga.conn.Close()
		return nil, err
	}
	for {
		line, err := qga.readLine()
		if err != nil {
			qga.conn.Close()
			return nil, err
		}
		var r struct {
			Return int64 `json:"return"`
		}
		if json.Unmarshal(line, &r) == nil && r.Return == id {
			break
		}
	}
	qga.conn.SetDeadline(time.Time{})
	v.mu.Lock()
	v.qga = qga
	v.mu.Unlock()
	return qga, nil
}

func (v *VM) dropGuest() {
	v.mu.Lock()
	if v.qga != nil {
		v.qga.conn.Close()
		v.qga = nil
	}
	v.mu.Unlock()
}

// Exec runs a shell command in the VM and returns its exit code and
// output (stdout then stderr).
func (v *VM) Exec(ctx context.Context, script string) (int, string, error) {
	qga, err := v.guest()
	if err != nil {
		return -1, "", err
	}
	raw, err := qga.call("guest-exec", map[string]any{"path": "/bin/sh", "arg": []string{"-c", script}, "capture-output": true})
	if err != nil {
		v.dropGuest()
		return -1, "", err
	}
	var started struct {
		PID int `json:"pid"`
	}
	json.Unmarshal(raw, &started)
	for {
		raw, err := qga.call("guest-exec-status", map[string]any{"pid": started.PID})
		if err != nil {
			v.dropGuest()
			return -1, "", err
		}
		var st struct {
			Exited   bool   `json:"exited"`
			ExitCode int    `json:"exitcode"`
			Out      string `json:"out-data"`
			Err      string `json:"err-data"`
		}
		json.Unmarshal(raw, &st)
		if st.Exited {
			out, _ := base64.StdEncoding.DecodeString(st.Out)
			errOut, _ := base64.StdEncoding.DecodeString(st.Err)
			return st.ExitCode, string(out) + string(errOut), nil
		}
		select {
		case <-ctx.Done():
			return -1, "", ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// MustExec runs script and fails the test unless it exits 0.
func (v *VM) MustExec(script string) string {
	v.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	code, out, err := v.Exec(ctx, script)
	if err != nil || code != 0 {
		v.t.Fatalf("in VM %s: %q: exit %d, %v\n%s", v.Name, script, code, err, out)
	}
	return out
}

// WaitGuest waits until the guest agent answers (the VM booted).
func (v *VM) WaitGuest(timeout time.Duration) {
	v.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		code, _, err := v.Exec(ctx, "true")
		cancel()
		if err == nil && code == 0 {
			return
		}
		if !v.Running() {
			v.t.Fatalf("VM %s stopped while booting:\n%s\n%s", v.Name, v.qemuLog(), tail(v.Console(), 40))
		}
		if time.Now().After(deadline) {
			v.t.Fatalf("VM %s: no guest agent after %v (last: %v)\n%s", v.Name, timeout, err, tail(v.Console(), 40))
		}
		v.dropGuest()
		time.Sleep(time.Second)
	}
}

// WaitFor polls script in the VM until it exits 0.
func (v *VM) WaitFor(timeout time.Duration, what, script string) string {
	v.t.Helper()
	deadline := time.Now().Add(timeout)
	var last string
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		code, out, err := v.Exec(ctx, script)
		cancel()
		if err == nil && code == 0 {
			return out
		}
		last = fmt.Sprintf("exit %d, %v: %s", code, err, out)
		if err != nil {
			v.dropGuest()
		}
		if time.Now().After(deadline) {
			v.t.Fatalf("VM %s: %s: not within %v; last: %s", v.Name, what, timeout, last)
		}
		time.Sleep(500 * time.Millisecond)
	}
}
