package haproxy

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/textproto"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/amphora-agent/amphora-agent/agent/pidfile"
)

// keptConn sends a request every few milliseconds on one kept-alive
// connection to port until stop; stop returns how many were answered and
// the first failure (the connection is never dialled again).
func keptConn(t *testing.T, port int) (stop func() (int, error)) {
	t.Helper()
	c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(port), 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	quit, ended := make(chan struct{}), make(chan struct{})
	var (
		answered int
		failed   error
	)
	go func() {
		defer close(ended)
		defer c.Close()
		r := bufio.NewReader(c)
		for {
			select {
			case <-quit:
				return
			case <-time.After(20 * time.Millisecond):
			}
			c.SetDeadline(time.Now().Add(10 * time.Second))
			if _, err := fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: lb\r\n\r\n"); err != nil {
				failed = err
				return
			}
			if err := readAnswer(r); err != nil {
				failed = err
				return
			}
			answered++
		}
	}()
	return func() (int, error) {
		close(quit)
		<-ended
		return answered, failed
	}
}

// readAnswer reads one HTTP/1.1 answer with a Content-Length body; one
// that is not a 200 or that closes the connection is an error. Domain
// packages' tests stay off net/http as their code does.
func readAnswer(r *bufio.Reader) error {
	tp := textproto.NewReader(r)
	status, err := tp.ReadLine()
	if err != nil {
		return err
	}
	h, err := tp.ReadMIMEHeader()
	if err != nil {
		return err
	}
	n, err := strconv.Atoi(h.Get("Content-Length"))
	if err != nil {
		return fmt.Errorf("answer %q without a length: %v", status, err)
	}
	if _, err := io.CopyN(io.Discard, r, int64(n)); err != nil {
		return err
	}
	if !strings.HasPrefix(status, "HTTP/1.1 200 ") || strings.EqualFold(h.Get("Connection"), "close") {
		return fmt.Errorf("answer %q, connection %q", status, h.Get("Connection"))
	}
	return nil
}

// An agent restarted while its HAProxy master is stopped (SIGSTOP: its
// workers serve on, its master socket answers nothing) adopts that master
// at once, as for a master too busy to answer: nothing is started, nothing
// killed, and a connection the worker holds keeps being served. The
// silence is logged, and so is the answer once the master runs again.
func TestRestoreAdoptsAStoppedMaster(t *testing.T) {
	sup, st, port := realSupervisor(t)
	startGen1(t, sup, st, port)
	master, err := pidfile.Read(st.Layout.PidPath("lb1"))
	if err != nil {
		t.Fatal(err)
	}
	stop := keptConn(t, port)
	sup.Close()
	if err := syscall.Kill(master, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Kill(master, syscall.SIGCONT) })

	sup2 := NewSupervisor(testOptions(t, st, nil))
	t.Cleanup(sup2.Close)
	logs := observed(t, sup2)
	restored := time.Now()
	if err := sup2.Restore(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Logf("restore took %v", time.Since(restored).Round(time.Millisecond))
	if pid := sup2.instance("lb1").d.Pid(); pid != master {
		t.Fatalf("after the restore the master is %d, want the stopped %d adopted", pid, master)
	}
	waitLogged(t, logs, 15*time.Second, "adopted HAProxy does not answer")
	waitAnswer(t, port, "gen1")
	if err := syscall.Kill(master, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	waitLogged(t, logs, 30*time.Second, "adopted HAProxy answers now")
	waitAnswer(t, port, "gen1")
	answered, err := stop()
	if err != nil || answered == 0 {
		t.Fatalf("the kept connection: %d answers, then %v", answered, err)
	}
	t.Logf("the kept connection: %d answers", answered)
	if pid, _ := pidfile.Read(st.Layout.PidPath("lb1")); pid != master || syscall.Kill(master, 0) != nil {
		t.Fatalf("master %d, pid file %d: want %d running", sup2.instance("lb1").d.Pid(), pid, master)
	}
}
