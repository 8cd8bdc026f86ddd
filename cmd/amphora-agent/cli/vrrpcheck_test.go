package cli

import (
	"io"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/amphora-agent/amphora-agent/haproxy/stats/haproxytest"
)

// fakeStatsSocket answers each command with reply and closes the
// connection.
func fakeStatsSocket(t *testing.T, reply string) string {
	path := filepath.Join(t.TempDir(), "s.sock")
	haproxytest.ServeFake(t, path, func(string) (string, bool) { return reply, false })
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
