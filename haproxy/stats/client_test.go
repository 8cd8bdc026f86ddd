package stats_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/amphora-agent/amphora-agent/agent/testkit"
	"github.com/amphora-agent/amphora-agent/haproxy/stats"
	"github.com/amphora-agent/amphora-agent/haproxy/stats/haproxytest"
)

func testdata(t *testing.T, name string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func TestCommandOnePerConnection(t *testing.T) {
	sample := string(testdata(t, "show-stat-all.csv"))
	f := haproxytest.ServeFake(t, fakePath(t), func(cmd string) (string, bool) {
		switch cmd {
		case "show stat -1 -1 -1":
			return sample, false
		case "show info":
			return string(testdata(t, "show-info.txt")), false
		case "show servers state":
			return "1\n# be_id be_name\n3 p1:fe1 1 m1\n\n", false
		}
		return "Unknown command\n", false
	})
	ctx := context.Background()
	var buf bytes.Buffer
	rows, err := stats.ShowStat(ctx, f.Path, &buf, nil)
	if err != nil || len(rows) != 10 {
		t.Fatalf("ShowStat: %d rows, %v", len(rows), err)
	}
	info, err := haproxytest.ShowInfo(ctx, f.Path)
	if err != nil {
		t.Fatal(err)
	}
	if up, _ := info.UptimeSec(); up != 727 {
		t.Errorf("Uptime_sec %d", up)
	}
	state, err := stats.ShowServersState(ctx, f.Path)
	if err != nil || string(state) != "1\n# be_id be_name\n3 p1:fe1 1 m1\n\n" {
		t.Fatalf("ShowServersState = %q, %v", state, err)
	}
	raw, err := stats.Command(ctx, f.Path, "show nothing")
	if err != nil || string(raw) != "Unknown command\n" {
		t.Fatalf("Command = %q, %v", raw, err)
	}
	want := []string{"show stat -1 -1 -1\n", "show info\n", "show servers state\n", "show nothing\n"}
	if got := f.Commands(); len(got) != len(want) {
		t.Fatalf("commands %q, want %q", got, want)
	} else {
		for i := range want {
			if got[i] != want[i] {
				t.Errorf("command %d = %q, want %q", i, got[i], want[i])
			}
		}
	}
	if _, err := stats.Command(ctx, f.Path, "show stat\nshutdown sessions"); err == nil {
		t.Error("a command with a line break was sent")
	}
}

func TestErrorAnswersRejected(t *testing.T) {
	f := haproxytest.ServeFake(t, fakePath(t), func(string) (string, bool) { return "Permission denied\n", false })
	if _, err := stats.ShowServersState(context.Background(), f.Path); err == nil {
		t.Fatal("an error answer was returned as servers state")
	}
	var buf bytes.Buffer
	if _, err := stats.ShowStat(context.Background(), f.Path, &buf, nil); !errors.Is(err, stats.ErrNotCSV) {
		t.Errorf("an error answer to show stat: %v, want ErrNotCSV", err)
	}
	if _, err := haproxytest.ShowInfo(context.Background(), filepath.Join(filepath.Dir(f.Path), "none.sock")); err == nil {
		t.Fatal("a missing socket answered")
	}
}

// A socket that accepts and never answers must not stall the caller past
// its deadline; cancellation ends the wait too (health-and-config §7.19).
func TestCommandTimeout(t *testing.T) {
	f := haproxytest.ServeFake(t, fakePath(t), func(string) (string, bool) { return "", true })

	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() { _, err := stats.ShowStat(ctx, f.Path, new(bytes.Buffer), nil); done <- err }()
	select {
	case err := <-done:
		if err == nil || !stats.Timeout(err) {
			t.Fatalf("err = %v, want a timeout", err)
		}
	case <-time.After(stats.DefaultTimeout):
		t.Fatal("the deadline did not end the command")
	}

	ctx, cancel = context.WithCancel(context.Background())
	go func() { _, err := stats.Command(ctx, f.Path, "show info"); done <- err }()
	testkit.WaitFor(t, 5*time.Second, "the second command", func() bool { return len(f.Commands()) == 2 })
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) || !stats.Timeout(err) {
			t.Fatalf("err = %v, want context.Canceled", err)
		}
	case <-time.After(stats.DefaultTimeout):
		t.Fatal("cancellation did not end the command")
	}
}

func TestCommandRefused(t *testing.T) {
	dir := t.TempDir()
	_, err := stats.Command(context.Background(), filepath.Join(dir, "missing.sock"), "show info")
	var e *stats.Error
	if !errors.As(err, &e) || e.Command != "show info" || stats.Timeout(err) {
		t.Fatalf("err = %#v", err)
	}
}

// fakePath is where a test's fake stats socket listens.
func fakePath(t *testing.T) string { return filepath.Join(haproxytest.ShortDir(t), "s.sock") }
