package haproxy

import (
	"net/netip"
	"reflect"
	"testing"
)

func TestParse(t *testing.T) {
	cfg := `# Configuration for loadbalancer lb1
global
    daemon
    maxconn 4000
    user nobody
    stats socket /var/lib/octavia/lb1.sock mode 0666 level user

defaults
    mode http

frontend L1
    maxconn 50
    bind 203.0.113.10:80
    mode http
    default_backend P1:L1

frontend L2
    bind 203.0.113.10:443 ssl crt-list /var/lib/octavia/certs/lb1/L2.pem
    mode http

frontend L3
    bind 203.0.113.10:9000
    mode tcp

frontend L4
    bind 203.0.113.10:9001
    bind [2001:db8::10]:9001
    bind 2001:db8::11:9002 v4v6
    bind :::9003

backend P1:L1
    mode http
    load-server-state-from-file none
    server M1 198.51.100.5:80

backend P2:L2
    load-server-state-from-file global
`
	got := Parse([]byte(cfg))
	want := Summary{
		StatsSocket:      "/var/lib/octavia/lb1.sock",
		GlobalMaxconn:    4000,
		LoadsServerState: true,
		BindAddresses: []netip.Addr{
			netip.MustParseAddr("203.0.113.10"), netip.MustParseAddr("2001:db8::10"), netip.MustParseAddr("2001:db8::11"),
		},
		Frontends: []Frontend{
			{Name: "L1", Mode: "HTTP"},
			{Name: "L2", Mode: "TERMINATED_HTTPS", CrtList: "/var/lib/octavia/certs/lb1/L2.pem"},
			{Name: "L3", Mode: "TCP"},
			{Name: "L4", Mode: "HTTP"}, // from defaults
		},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Parse =\n%+v\nwant\n%+v", got, want)
	}
}

// Only a load-server-state-from-file other than none asks for the saved
// states.
func TestParseLoadsServerState(t *testing.T) {
	for cfg, want := range map[string]bool{
		"backend P\n    server M 198.51.100.5:80\n":             false,
		"backend P\n    load-server-state-from-file none\n":     false,
		"defaults\n    load-server-state-from-file global\n":    true,
		"backend P\n    load-server-state-from-file local\n":    true,
		"backend P\n    # load-server-state-from-file global\n": false,
		"backend P\n    load-server-state-from-file\n":          false,
	} {
		if got := Parse([]byte(cfg)).LoadsServerState; got != want {
			t.Errorf("Parse(%q).LoadsServerState = %v, want %v", cfg, got, want)
		}
	}
}
