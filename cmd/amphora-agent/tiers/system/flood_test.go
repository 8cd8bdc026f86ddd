//go:build system

package system_test

import (
	"bufio"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/testenv"
)

// A flood's bounds (a normal client served within 1 s, RSS under
// 40 MB) while 3,000 connections sit idle or trickle a
// TLS hello.
const (
	floodConns    = 3000
	floodRSSLimit = 40 << 20
	floodServedIn = time.Second
)

// TestFloodOfIdleAndSlowConnections opens 3,000 connections to the real
// binary, half silent and half sending a few bytes of a TLS record, keeps
// them open, and meanwhile a controller with its own new connection is
// served within 1 s each time; the agent's RSS, sampled from /proc all
// along, stays under 40 MB.
func TestFloodOfIdleAndSlowConnections(t *testing.T) {
	raiseOpenFiles(t, floodConns+500)
	e := testenv.New(t)
	e.Start()

	var peak atomic.Int64
	stop := make(chan struct{})
	var sampler sync.WaitGroup
	sampler.Add(1)
	go func() {
		defer sampler.Done()
		for {
			if rss, err := residentBytes(e.Pid()); err == nil && rss > peak.Load() {
				peak.Store(rss)
			}
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	stopSampling := func() { close(stop); sampler.Wait() }

	hello := clientHello(t)
	var conns []net.Conn
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	client := &http.Client{Timeout: 10 * time.Second,
		Transport: &http.Transport{TLSClientConfig: e.ClientTLS(), DisableKeepAlives: true}}
	served := func(when string) {
		t.Helper()
		start := time.Now()
		resp, err := client.Get(e.URL("/"))
		took := time.Since(start)
		if err != nil {
			t.Fatalf("%s: controller request failed after %v: %v", when, took, err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 || took > floodServedIn {
			t.Errorf("%s: controller answered %d after %v (bound %v)", when, resp.StatusCode, took, floodServedIn)
		}
	}
	for i := 0; i < floodConns; i++ {
		c, err := net.DialTimeout("tcp", e.Addr(), 5*time.Second)
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		conns = append(conns, c)
		switch i % 3 {
		case 1:
			// The start of a TLS handshake record, never finished.
			c.Write([]byte{0x16, 0x03, 0x01, 0x02})
		case 2:
			// A whole hello; the agent answers and waits for the rest.
			c.Write(hello)
		}
		if i%500 == 499 {
			served("after " + strconv.Itoa(i+1) + " connections")
		}
	}
	// The whole flood stays open while the controller keeps calling.
	for i := 0; i < 5; i++ {
		served("flood open, call " + strconv.Itoa(i+1))
	}
	stopSampling()
	t.Logf("agent RSS peak %.1f MB with %d connections open", float64(peak.Load())/(1<<20), len(conns))
	if peak.Load() == 0 {
		t.Fatal("RSS never sampled")
	}
	if peak.Load() >= floodRSSLimit {
		t.Errorf("agent RSS reached %.1f MB (bound %d MB)", float64(peak.Load())/(1<<20), floodRSSLimit>>20)
	}
}

// TestFailedHandshakesAreRateLimitedInTheLog: 400 connections that fail
// their TLS handshake (garbage instead of a hello, or no client
// certificate) produce a handful of log lines, not one each.
func TestFailedHandshakesAreRateLimitedInTheLog(t *testing.T) {
	e := testenv.New(t)
	e.Start()
	const failures = 400
	for i := 0; i < failures; i++ {
		c, err := net.DialTimeout("tcp", e.Addr(), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if i%2 == 0 {
			c.Write([]byte("GET / HTTP/1.0\r\n\r\n"))
			c.SetReadDeadline(time.Now().Add(5 * time.Second))
			bufio.NewReader(c).ReadByte()
		} else {
			// A TLS client without a certificate: refused by the agent.
			tc := tls.Client(c, &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12})
			tc.SetDeadline(time.Now().Add(5 * time.Second))
			tc.Handshake()
			tc.Read(make([]byte, 1))
		}
		c.Close()
	}
	// The agent still serves, and its log has not grown with the flood.
	if status, _, body := e.Do("GET", "/", nil); status != 200 {
		t.Fatalf("GET / after the flood: %d %s", status, body)
	}
	lines := e.Count("handshake")
	t.Logf("%d log lines about %d failed handshakes", lines, failures)
	if lines == 0 || lines > 5 {
		t.Fatalf("%d log lines about %d failed handshakes (want 1 to 5):\n%s", lines, failures, lastLines(e.Output(), 10))
	}
}

// clientHello returns the first flight of a TLS client, as bytes to
// replay.
func clientHello(t *testing.T) []byte {
	t.Helper()
	client, server := net.Pipe()
	defer server.Close()
	go func() {
		tls.Client(client, &tls.Config{ServerName: "amphora", MinVersion: tls.VersionTLS12}).Handshake()
		client.Close()
	}()
	server.SetReadDeadline(time.Now().Add(5 * time.Second))
	head := make([]byte, 5)
	if _, err := io.ReadFull(server, head); err != nil {
		t.Fatal(err)
	}
	rest := make([]byte, int(head[3])<<8|int(head[4]))
	if _, err := io.ReadFull(server, rest); err != nil {
		t.Fatal(err)
	}
	return append(head, rest...)
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// raiseOpenFiles lifts this process's soft open-files limit to at least
// n, within the hard limit (the agent inherits it too).
func raiseOpenFiles(t *testing.T, n uint64) {
	t.Helper()
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	if lim.Cur >= n {
		return
	}
	if lim.Max < n {
		t.Fatalf("open-files hard limit %d is below the %d this test needs", lim.Max, n)
	}
	old := lim
	lim.Cur = n
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Setrlimit(syscall.RLIMIT_NOFILE, &old) })
}

// residentBytes reads VmRSS of pid from /proc.
func residentBytes(pid int) (int64, error) {
	f, err := readProcStatus(pid)
	return f.RSS, err
}
