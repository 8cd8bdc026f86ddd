package stats_test

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/amphora-agent/amphora-agent/haproxy/stats"
	"github.com/amphora-agent/amphora-agent/haproxy/stats/haproxytest"
)

const masterAnswer = "#<PID>          <type>          <reloads>       <uptime>        <version>\n" +
	"4100            master          3 [failed: 0]   0d00h00m09s     2.6.12\n" +
	"# workers\n4242            worker          0               0d00h00m01s     2.6.12\n"

// A master re-executing for a reload may keep a connection it accepted
// and never answer it: ShowProcAgain asks again on a new connection once
// its first window (1 s) passes, where ShowProc waits out its context.
func TestShowProcAgainLeavesAConnectionNeverAnswered(t *testing.T) {
	var conns atomic.Int32
	f := haproxytest.ServeFakeConn(t, fakePath(t), func(_ string, conn net.Conn, release <-chan struct{}) {
		if conns.Add(1) == 1 {
			<-release // the connection the old image took
			return
		}
		conn.Write([]byte(masterAnswer))
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	p, err := stats.ShowProcAgain(ctx, f.Path)
	if err != nil || p.MasterPID != 4100 || len(p.Workers) != 1 {
		t.Fatalf("ShowProcAgain: %+v, %v; want the master's answer on the second connection", p, err)
	}
	if n := conns.Load(); n != 2 {
		t.Fatalf("%d connections, want 2", n)
	}

	// ShowProc alone, given the same stuck first connection, gets nothing.
	conns.Store(0)
	short, cancel2 := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel2()
	if p, err := stats.ShowProc(short, f.Path); err == nil || !stats.Timeout(err) {
		t.Fatalf("ShowProc on a connection never answered: %+v, %v; want a time-out", p, err)
	}
}

// An error other than silence (nobody listens) is returned at once.
func TestShowProcAgainReturnsARefusalAtOnce(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// Asked again and again, it would end with ctx's time-out.
	if _, err := stats.ShowProcAgain(ctx, fakePath(t)); err == nil || stats.Timeout(err) {
		t.Fatalf("no socket: %v; want the connection's error", err)
	}
}
