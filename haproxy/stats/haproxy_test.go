package stats_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/amphora-agent/amphora-agent/agent/testkit"
	"github.com/amphora-agent/amphora-agent/haproxy/stats"
	"github.com/amphora-agent/amphora-agent/haproxy/stats/haproxytest"
)

// The client against a real HAProxy 2.x (no root needed): the stats socket
// as the controller renders it (`level user`) and the master CLI.
func TestRealHAProxy(t *testing.T) {
	dir := haproxytest.ShortDir(t)
	sock := filepath.Join(dir, "lb.sock")
	fe, member := haproxytest.FreePort(t), haproxytest.FreePort(t)
	cfg := haproxytest.Preamble(100, sock) + fmt.Sprintf(`
frontend listener-1
    bind 127.0.0.1:%d
    default_backend pool-1:listener-1

backend pool-1:listener-1
    server member-1 127.0.0.1:%d weight 0
    server member-2 127.0.0.1:%d disabled
`, fe, member, member)
	// A drained (weight 0) and a disabled member leave the backend without
	// usable weight: HAProxy reports it DOWN.
	hp := haproxytest.Start(t, haproxytest.Options{Config: cfg, Dir: dir, StatsSocket: sock})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	var buf bytes.Buffer
	rows, err := stats.ShowStat(ctx, sock, &buf, nil)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range rows {
		got = append(got, r.PxName()+"/"+r.SvName()+"="+r.Status()+" w"+r.Get(stats.ColWeight))
	}
	want := "listener-1/FRONTEND=OPEN w pool-1:listener-1/member-1=no check w0 pool-1:listener-1/member-2=MAINT w1 pool-1:listener-1/BACKEND=DOWN w0"
	if strings.Join(got, " ") != want {
		t.Errorf("show stat:\n%s\nwant\n%s", strings.Join(got, " "), want)
	}
	for _, col := range []string{stats.ColScur, stats.ColStot, stats.ColBin, stats.ColBout, stats.ColEreq} {
		if _, err := rows[0].Uint(col); err != nil {
			t.Errorf("FRONTEND %s: %v", col, err)
		}
	}

	back, err := showStat(ctx, sock, "show stat -1 6 -1") // backends and servers
	if err != nil || len(back) != 3 {
		t.Fatalf("show stat -1 6 -1: %d rows, %v", len(back), err)
	}

	info, err := haproxytest.ShowInfo(ctx, sock)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := info.UptimeSec(); err != nil || info["Name"] != "HAProxy" {
		t.Errorf("show info: %v %v", info, err)
	}

	state, err := stats.ShowServersState(ctx, sock)
	if err != nil || !strings.Contains(string(state), "pool-1:listener-1 1 member-1") {
		t.Errorf("show servers state = %q, %v", state, err)
	}

	// The master CLI speaks the same protocol.
	out, err := stats.Command(ctx, hp.Master, "show proc")
	if err != nil || !strings.Contains(string(out), "master") {
		t.Errorf("master show proc = %q, %v", out, err)
	}
	out, err = stats.Command(ctx, hp.Master, "@1 show info")
	if err != nil || !strings.Contains(string(out), "Uptime_sec:") {
		t.Errorf("master @1 show info = %q, %v", out, err)
	}
}

// A long answer (10 backends × 250 servers, about 750 KB: HAProxy writes
// it in many pieces, as fast as the reader takes them) arrives whole
// through the heartbeat's paced read, the same rows as a blocking Command.
func TestRealHAProxyLongAnswerPaced(t *testing.T) {
	dir := haproxytest.ShortDir(t)
	sock := filepath.Join(dir, "lb.sock")
	var cfg strings.Builder
	cfg.WriteString(haproxytest.Preamble(100, sock))
	for l := range 10 {
		fmt.Fprintf(&cfg, "frontend listener-%d\n    bind 127.0.0.1:%d\n    default_backend pool-%d:listener-%d\n"+
			"backend pool-%d:listener-%d\n", l, haproxytest.FreePort(t), l, l, l, l)
		for m := range 250 {
			fmt.Fprintf(&cfg, "    server member-%d-%d 127.0.0.1:9 weight %d\n", l, m, m%3)
		}
	}
	began := time.Now()
	hp := haproxytest.Start(t, haproxytest.Options{Config: cfg.String(), Dir: dir, StatsSocket: sock})
	up := time.Since(began)
	// Each read has a deadline of its own, not the rest of one shared by
	// all four; a failure says how long each step took.
	read := func(f func(context.Context) error) (time.Duration, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		start := time.Now()
		err := f(ctx)
		return time.Since(start), err
	}
	summary := func(rows []stats.Row) string {
		var b strings.Builder
		for _, r := range rows {
			fmt.Fprintf(&b, "%s/%s=%s w%s\n", r.PxName(), r.SvName(), r.Status(), r.Get(stats.ColWeight))
		}
		return b.String()
	}
	var want []stats.Row
	took, err := read(func(ctx context.Context) (err error) {
		want, err = showStat(ctx, sock, "show stat -1 -1 -1")
		return err
	})
	if err != nil || len(want) != 10*252 {
		t.Fatalf("blocking read: %d rows, %v after %v (HAProxy up after %v)", len(want), err, took, up)
	}
	var buf bytes.Buffer
	var rows []stats.Row
	for i := range 3 { // the buffers reused, as the heartbeat does
		took, err := read(func(ctx context.Context) (err error) {
			rows, err = stats.ShowStat(ctx, sock, &buf, rows)
			return err
		})
		if err != nil {
			// What HAProxy was doing: does it answer a blocking read now,
			// and how many connections wait on its stats socket.
			again, aerr := read(func(ctx context.Context) error { _, err := stats.Command(ctx, sock, "show info"); return err })
			t.Fatalf("paced read %d: %v after %v (HAProxy up after %v, the test began %v ago); then show info: %v after %v, %d connections queued on the socket\n%s",
				i+1, err, took, up, time.Since(began), aerr, again, queued(t, sock), hp.Output())
		}
		if buf.Len() < 500<<10 {
			t.Fatalf("answer of %d bytes, want a long one", buf.Len())
		}
		if got := summary(rows); got != summary(want) {
			t.Fatalf("paced read: %d rows, blocking read %d; they differ", len(rows), len(want))
		}
	}
}

// A reloading master takes the listening sockets over from its current
// worker, giving up after 1 s; it then binds a new stats socket and
// renames it over the path. A read queued on the old socket meanwhile is
// answered by the new worker, not held until the old one runs again
// (here it is stopped; during back-to-back reloads it may still be
// starting, or starved of CPU).
func TestRealHAProxyReadFollowsReplacedSocket(t *testing.T) {
	if _, err := exec.LookPath("ss"); err != nil {
		t.Skip("ss (iproute2) is needed to see the queued connections")
	}
	dir := haproxytest.ShortDir(t)
	sock := filepath.Join(dir, "lb.sock")
	cfg := haproxytest.Preamble(100, sock) + fmt.Sprintf(`
frontend listener-1
    bind 127.0.0.1:%d
    default_backend pool-1:listener-1

backend pool-1:listener-1
    server member-1 127.0.0.1:%d
`, haproxytest.FreePort(t), haproxytest.FreePort(t))
	hp := haproxytest.Start(t, haproxytest.Options{Config: cfg, Dir: dir, StatsSocket: sock})
	hp.StallWorker()
	before, err := os.Stat(sock)
	if err != nil {
		t.Fatal(err)
	}

	// Both engines: the heartbeat's paced read and a blocking command.
	results := make(chan error, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	go func() {
		_, err := stats.ShowStat(ctx, sock, new(bytes.Buffer), nil)
		results <- err
	}()
	go func() {
		_, err := haproxytest.ShowInfo(ctx, sock)
		results <- err
	}()
	if !testkit.Until(10*time.Second, func() bool { return queued(t, sock) == 2 }) {
		t.Fatalf("the stats socket's queue holds %d connections, want the 2 reads", queued(t, sock))
	}
	if _, err := hp.TryReload(); err != nil {
		t.Fatal(err)
	}
	if after, err := os.Stat(sock); err != nil || os.SameFile(before, after) {
		t.Skipf("this HAProxy kept the stats socket (%v): nothing to follow", err)
	}
	for range 2 {
		if err := <-results; err != nil {
			t.Errorf("read queued on the replaced socket: %v", err)
		}
	}
}

// queued is how many connections wait to be accepted on the listening
// socket bound at sock (HAProxy binds it as <sock>.<pid>.tmp).
func queued(t *testing.T, sock string) int {
	t.Helper()
	out, err := exec.Command("ss", "-xlnH").Output()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, line := range strings.Split(string(out), "\n") {
		// u_str LISTEN <Recv-Q> <Send-Q> <address> <inode> * 0
		f := strings.Fields(line)
		if len(f) > 4 && (f[4] == sock || strings.HasPrefix(f[4], sock+".")) {
			q, _ := strconv.Atoi(f[2])
			n += q
		}
	}
	return n
}

// showStat sends cmd (a `show stat`) with a blocking Command and parses
// the answer.
func showStat(ctx context.Context, sock, cmd string) ([]stats.Row, error) {
	out, err := stats.Command(ctx, sock, cmd)
	if err != nil {
		return nil, err
	}
	return stats.ParseStat(out)
}
