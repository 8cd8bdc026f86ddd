package stats

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/amphora-agent/amphora-agent/agent/testkit"
)

// fakeSocket serves a UNIX socket the way HAProxy's stats socket does:
// read one command line, answer, close. It records the commands.
type fakeSocket struct {
	path string
	mu   sync.Mutex
	cmds []string
}

func newFakeSocket(t *testing.T, answer func(cmd string) (string, bool)) *fakeSocket {
	return newFakeSocketConn(t, func(cmd string, conn net.Conn, release <-chan struct{}) {
		out, hang := answer(cmd)
		if hang {
			// Keep the connection open without answering.
			<-release
			return
		}
		conn.Write([]byte(out))
	})
}

// newFakeSocketConn is newFakeSocket with the answer written by serve,
// which may wait for release (the end of the test); the connection is
// closed when serve returns.
func newFakeSocketConn(t *testing.T, serve func(cmd string, conn net.Conn, release <-chan struct{})) *fakeSocket {
	t.Helper()
	dir, err := os.MkdirTemp("", "st")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	f := &fakeSocket{path: filepath.Join(dir, "s.sock")}
	release := make(chan struct{})
	ln, err := net.Listen("unix", f.path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { close(release); ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				line, err := bufio.NewReader(conn).ReadString('\n')
				if err != nil {
					return
				}
				f.mu.Lock()
				f.cmds = append(f.cmds, line)
				f.mu.Unlock()
				serve(line[:len(line)-1], conn, release)
			}()
		}
	}()
	return f
}

func (f *fakeSocket) commands() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.cmds...)
}

func TestCommandOnePerConnection(t *testing.T) {
	sample := string(readFile(t, "show-stat-all.csv"))
	f := newFakeSocket(t, func(cmd string) (string, bool) {
		switch cmd {
		case "show stat -1 -1 -1":
			return sample, false
		case "show info":
			return string(readFile(t, "show-info.txt")), false
		case "show servers state":
			return "1\n# be_id be_name\n3 p1:fe1 1 m1\n\n", false
		}
		return "Unknown command\n", false
	})
	ctx := context.Background()
	rows, err := ShowStat(ctx, f.path, All, All, All)
	if err != nil || len(rows) != 10 {
		t.Fatalf("ShowStat: %d rows, %v", len(rows), err)
	}
	info, err := ShowInfo(ctx, f.path)
	if err != nil {
		t.Fatal(err)
	}
	if up, _ := info.UptimeSec(); up != 727 {
		t.Errorf("Uptime_sec %d", up)
	}
	state, err := ShowServersState(ctx, f.path)
	if err != nil || string(state) != "1\n# be_id be_name\n3 p1:fe1 1 m1\n\n" {
		t.Fatalf("ShowServersState = %q, %v", state, err)
	}
	raw, err := Command(ctx, f.path, "show nothing")
	if err != nil || string(raw) != "Unknown command\n" {
		t.Fatalf("Command = %q, %v", raw, err)
	}
	if _, err := ShowStat(ctx, f.path, All, TypeBackends|TypeServers, All); !errors.Is(err, ErrNotCSV) {
		t.Errorf("an error answer to show stat: %v, want ErrNotCSV", err)
	}
	want := []string{"show stat -1 -1 -1\n", "show info\n", "show servers state\n", "show nothing\n", "show stat -1 6 -1\n"}
	if got := f.commands(); len(got) != len(want) {
		t.Fatalf("commands %q, want %q", got, want)
	} else {
		for i := range want {
			if got[i] != want[i] {
				t.Errorf("command %d = %q, want %q", i, got[i], want[i])
			}
		}
	}
	if _, err := Command(ctx, f.path, "show stat\nshutdown sessions"); err == nil {
		t.Error("a command with a line break was sent")
	}
}

func TestServersStateRejectsErrors(t *testing.T) {
	f := newFakeSocket(t, func(string) (string, bool) { return "Permission denied\n", false })
	if _, err := ShowServersState(context.Background(), f.path); err == nil {
		t.Fatal("an error answer was returned as servers state")
	}
	if _, err := ShowInfo(context.Background(), filepath.Join(filepath.Dir(f.path), "none.sock")); err == nil {
		t.Fatal("a missing socket answered")
	}
}

// A socket that accepts and never answers must not stall the caller past
// its deadline; cancellation ends the wait too (health-and-config §7.19).
func TestCommandTimeout(t *testing.T) {
	f := newFakeSocket(t, func(string) (string, bool) { return "", true })

	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() { _, err := ShowStat(ctx, f.path, All, All, All); done <- err }()
	select {
	case err := <-done:
		if err == nil || !Timeout(err) {
			t.Fatalf("err = %v, want a timeout", err)
		}
	case <-time.After(DefaultTimeout):
		t.Fatal("the deadline did not end the command")
	}

	ctx, cancel = context.WithCancel(context.Background())
	go func() { _, err := Command(ctx, f.path, "show info"); done <- err }()
	testkit.WaitFor(t, 5*time.Second, "the second command", func() bool { return len(f.commands()) == 2 })
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) || !Timeout(err) {
			t.Fatalf("err = %v, want context.Canceled", err)
		}
	case <-time.After(DefaultTimeout):
		t.Fatal("cancellation did not end the command")
	}
}

func TestCommandRefused(t *testing.T) {
	dir := t.TempDir()
	_, err := Command(context.Background(), filepath.Join(dir, "missing.sock"), "show info")
	var e *Error
	if !errors.As(err, &e) || e.Command != "show info" || Timeout(err) {
		t.Fatalf("err = %#v", err)
	}
}

// An answer written in HAProxy-sized pieces arrives whole; one that keeps
// trickling past the deadline ends with a time-out at the deadline, not
// when the sender stops (the blocking read keeps the deadline).
func TestCommandReadsPiecesUntilClose(t *testing.T) {
	piece := []byte(strings.Repeat("x", 16<<10))
	f := newFakeSocketConn(t, func(cmd string, conn net.Conn, release <-chan struct{}) {
		pieces := 40
		if cmd == "trickle" {
			pieces = 1 << 30
		}
		for range pieces {
			if _, err := conn.Write(piece); err != nil {
				return
			}
			select {
			case <-release:
				return
			case <-time.After(time.Millisecond):
			}
		}
	})
	for _, paced := range []bool{false, true} {
		var buf bytes.Buffer
		out, err := commandInto(context.Background(), f.path, "show stat", &buf, paced)
		if err != nil || len(out) != 40*len(piece) {
			t.Fatalf("paced %v: %d bytes, %v; want %d", paced, len(out), err, 40*len(piece))
		}
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		start := time.Now()
		_, err = commandInto(ctx, f.path, "trickle", &buf, paced)
		cancel()
		if took := time.Since(start); !Timeout(err) || took > 2*time.Second {
			t.Fatalf("paced %v: trickling answer: %v after %v, want a time-out at 300 ms", paced, err, took)
		}
	}
}
