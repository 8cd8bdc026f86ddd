package cli

import (
	"io"
	"net"
	"path/filepath"
	"reflect"
	"testing"
)

// fakeStatsSocket answers each connection with reply and closes it.
func fakeStatsSocket(t *testing.T, reply string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "s.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			buf := make([]byte, 64)
			c.Read(buf)
			io.WriteString(c, reply)
			c.Close()
		}
	}()
	return path
}

func TestVRRPCheck(t *testing.T) {
	up := fakeStatsSocket(t, "# pxname,svname,status\nL1,FRONTEND,OPEN\n")
	silent := fakeStatsSocket(t, "")
	missing := filepath.Join(t.TempDir(), "missing.sock")
	cases := []struct {
		name  string
		socks []string
		want  int
	}{
		{"all answer", []string{up, up}, 0},
		{"one silent", []string{up, silent}, 1},
		{"two silent", []string{silent, silent, up}, 2},
		{"unreachable socket", []string{up, missing}, 1},
		{"no sockets", nil, 0},
	}
	for _, c := range cases {
		if got := runVRRPCheck(c.socks, io.Discard, io.Discard); got != c.want {
			t.Errorf("%s: exit %d, want %d", c.name, got, c.want)
		}
	}
}

func TestArgsForAliases(t *testing.T) {
	for argv0, want := range map[string][]string{
		"/usr/local/bin/haproxy-vrrp-check": {"haproxy-vrrp-check", "a.sock"},
		"/usr/local/bin/amphora-interface":  {"interface", "a.sock"},
		"amphora-health-checker":            {"health-checker", "a.sock"},
		"/usr/bin/amphora-agent":            {"a.sock"},
	} {
		if got := ArgsFor([]string{argv0, "a.sock"}); !reflect.DeepEqual(got, want) {
			t.Errorf("%s: %v, want %v", argv0, got, want)
		}
	}
}
