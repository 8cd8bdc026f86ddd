package config

import (
	"crypto/tls"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// base sets the two options whose absence always warns, so a case only
// sees the warnings it causes. Later lines override it.
const base = "[amphora_agent]\namphora_id = amp-1\n[health_manager]\ncontroller_ip_port_list = 192.0.2.1:5555\nheartbeat_key = k\n"

func one(text string) []Source { return []Source{{Name: "t.conf", Data: []byte(text)}} }

// checkWarnings wants exactly len(want) warnings, the i-th containing
// want[i].
func checkWarnings(t *testing.T, got, want []string) {
	t.Helper()
	ok := len(got) == len(want)
	for i := 0; ok && i < len(want); i++ {
		ok = strings.Contains(got[i], want[i])
	}
	if !ok {
		t.Errorf("warnings = %q\nwant ones containing %q", got, want)
	}
}

// TestLoadValues covers the dialect end to end (through viper) and the
// typed options.
func TestLoadValues(t *testing.T) {
	tests := []struct {
		name  string
		in    string // appended to base
		get   func(*Config) any
		want  any
		warns []string
	}{
		{"DEFAULT", "[DEFAULT]\ndebug = true\n", func(c *Config) any { return c.Debug }, true, nil},
		{"lower-case default is not DEFAULT", "[default]\ndebug = true\n", func(c *Config) any { return c.Debug }, false, nil},
		{"mixed-case Default is not DEFAULT", "[Default]\ndebug = true\n", func(c *Config) any { return c.Debug }, false, nil},
		{"section names fold case", "[Health_Manager]\nheartbeat_interval = 20\n", func(c *Config) any { return c.HeartbeatInterval }, 20 * time.Second, nil},
		{"option names fold case", "[HAPROXY_AMPHORA]\nBIND_PORT = 1234\n", func(c *Config) any { return c.BindPort }, 1234, nil},
		{"dash then underscore: one key, last wins", "[haproxy-amphora]\nbind-port = 1000\nbind_port = 2000\n", func(c *Config) any { return c.BindPort }, 2000, nil},
		{"underscore then dash: one key, last wins", "[haproxy_amphora]\nbind_port = 2000\nbind-port = 1000\n", func(c *Config) any { return c.BindPort }, 1000, nil},
		{"dashed section repeated", "[haproxy_amphora]\nbind_port = 1\n[haproxy-amphora]\nbind-port = 2\n[haproxy_amphora]\nbind_host = ::1\n", func(c *Config) any { return c.ListenAddress() }, "[::1]:2", nil},
		{"last value wins within a file", "[haproxy_amphora]\nbind_port = 1\nbind_port = 2\n", func(c *Config) any { return c.BindPort }, 2, nil},
		{"colon separator", "[haproxy_amphora]\nbind_host: ::1\n", func(c *Config) any { return c.BindHost }, "::1", nil},
		{"quotes stripped", "[haproxy_amphora]\nbase_path = \"/srv/octavia\"\nbase_cert_dir = '/srv/certs'\n", func(c *Config) any { return c.BasePath + " " + c.BaseCertDir }, "/srv/octavia /srv/certs", nil},
		{"whitespace around an integer", "[haproxy_amphora]\nbind_port = \"  8443 \"\n", func(c *Config) any { return c.BindPort }, 8443, nil},
		{"continuation lines", "[health_manager]\nheartbeat_key = a\n  b\n\tc\n", func(c *Config) any { return c.HeartbeatKey }, "a\nb\nc", nil},
		{"$$ and \\$ are a literal $", "[health_manager]\nheartbeat_key = a$$b\\$c$ 1$\n", func(c *Config) any { return c.HeartbeatKey }, "a$b$c$ 1$", nil},
		{"heartbeat key verbatim, no HTML unescaping", "[health_manager]\nheartbeat_key = a&amp;b&lt;\n", func(c *Config) any { return c.HeartbeatKey }, "a&amp;b&lt;", nil},
		{"unknown sections and keys ignored", "[nonsense]\nfoo = bar\n[haproxy_amphora]\nconnection_max_retries = x\nhaproxy_template = y\n[DEFAULT]\nlog_dir = /var/log\n", func(c *Config) any { return *c }, withSources(*defaults(), "t.conf", func(c *Config) {
			c.AmphoraID, c.HeartbeatKey, c.ControllerIPPortList = "amp-1", "k", []string{"192.0.2.1:5555"}
		}), nil},
		{"None means default", "[haproxy_amphora]\nbind_port = None\nbase_path = None\n[controller_worker]\nloadbalancer_topology = None\n", func(c *Config) any { return fmt.Sprint(c.BindPort, c.BasePath, c.Topology) }, "9443/var/lib/octaviaSINGLE", nil},
		{"None for the heartbeat key", "[health_manager]\nheartbeat_key = None\n", func(c *Config) any { return c.HeartbeatKey }, "None", []string{"heartbeat_key is not set"}},
		{"None for amphora_id", "[amphora_agent]\namphora_id = None\n", func(c *Config) any { return c.AmphoraID }, "", []string{"amphora_id is not set"}},
		{"None is exact", "[amphora_agent]\namphora_id = none\n", func(c *Config) any { return c.AmphoraID }, "none", nil},
		{"bool spellings", "[DEFAULT]\ndebug = On\nuse_syslog = YES\n", func(c *Config) any { return c.Debug && c.UseSyslog }, true, nil},
		{"bool false spellings", "[DEFAULT]\ndebug = off\nuse_syslog = 0\n", func(c *Config) any { return c.Debug || c.UseSyslog }, false, nil},
		{"syslog facility without prefix", "[DEFAULT]\nsyslog_log_facility = local3\n", func(c *Config) any { return c.SyslogFacility }, "LOG_LOCAL3", nil},
		{"syslog facility mixed case", "[DEFAULT]\nsyslog_log_facility = Log_Daemon\n", func(c *Config) any { return c.SyslogFacility }, "LOG_DAEMON", nil},
		{"read timeout", "[amphora_agent]\nagent_request_read_timeout = 30\n", func(c *Config) any { return c.RequestReadTimeout }, 30 * time.Second, nil},
		{"TLSv1.3 minimum", "[amphora_agent]\nagent_tls_protocol = TLSv1.3\n", func(c *Config) any { return c.TLSMinVersion }, uint16(tls.VersionTLS13), nil},
		// The agent warns about it (once), not the loader.
		{"TLSv1 raised to 1.2", "[amphora_agent]\nagent_tls_protocol = TLSv1\n", func(c *Config) any {
			return fmt.Sprint(c.TLSProtocol, c.TLSMinVersion == tls.VersionTLS12, c.WeakTLSProtocol())
		}, "TLSv1true true", nil},
		{"TLSv1.1 raised to 1.2", "[amphora_agent]\nagent_tls_protocol = TLSv1.1\n", func(c *Config) any {
			return fmt.Sprint(c.TLSProtocol, c.TLSMinVersion == tls.VersionTLS12, c.WeakTLSProtocol())
		}, "TLSv1.1true true", nil},
		{"SSLv3 raised to 1.2", "[amphora_agent]\nagent_tls_protocol = SSLv3\n", func(c *Config) any {
			return fmt.Sprint(c.TLSProtocol, c.TLSMinVersion == tls.VersionTLS12, c.WeakTLSProtocol())
		}, "SSLv3true true", nil},
		{"TLSv1.2 is not weak", "[amphora_agent]\nagent_tls_protocol = TLSv1.2\n", func(c *Config) any { return fmt.Sprint(c.TLSMinVersion == tls.VersionTLS12, c.WeakTLSProtocol()) }, "true false", nil},
		{"facilities", "[amphora_agent]\nadministrative_log_facility = 7\nuser_log_facility = 3\n", func(c *Config) any { return [2]int{c.AdministrativeLogFacility, c.UserLogFacility} }, [2]int{7, 3}, nil},
		{"deprecated udp driver", "[amphora_agent]\namphora_udp_driver = other\n", func(c *Config) any { return c.Topology }, "SINGLE", []string{"amphora_udp_driver = \"other\": deprecated and ignored"}},
		{"facility under haproxy_amphora is not read", "[haproxy_amphora]\nadministrative_log_facility = 3\nuser_log_facility = 0\n", func(c *Config) any { return c.AdministrativeLogFacility }, 1, []string{"[haproxy_amphora] administrative_log_facility = \"3\": ignored, like upstream: the agent uses [amphora_agent] administrative_log_facility (1)"}},
		{"use_upstart ignored", "[haproxy_amphora]\nuse_upstart = whatever\n", func(c *Config) any { return c.BindPort }, 9443, nil},
		{"extensions", "[amphora_agent]\nmax_upload_size = 1024\nnetwork_namespace = ns-1.a_b\nkeepalived_cmd = /opt/keepalived\n", func(c *Config) any { return fmt.Sprint(c.MaxUploadBytes, c.Namespace, c.KeepalivedCmd) }, "1024ns-1.a_b/opt/keepalived", nil},
		{"respawn", "[haproxy_amphora]\nrespawn_count = 0\nrespawn_interval = 0\n", func(c *Config) any { return fmt.Sprintf("%d %v", c.RespawnCount, c.RespawnInterval) }, "0 0s", nil},
		{"IPv4 bind host", "[haproxy_amphora]\nbind_host = 0.0.0.0\n", func(c *Config) any { return c.ListenAddress() }, "0.0.0.0:9443", nil},
		{"zoned bind host", "[haproxy_amphora]\nbind_host = fe80::1%eth0\n", func(c *Config) any { return c.ListenAddress() }, "[fe80::1%eth0]:9443", nil},
		{"topology lower case", "[controller_worker]\nloadbalancer_topology = active_standby\n", func(c *Config) any { return c.ActiveStandby() }, true, nil},
		{"topology with dash", "[controller_worker]\nloadbalancer_topology = Active-Standby\n", func(c *Config) any { return c.Topology }, TopologyActiveStandby, nil},
		{"topology single lower case", "[controller_worker]\nloadbalancer_topology = single\n", func(c *Config) any { return c.Topology }, TopologySingle, nil},
		{"empty controller list", "[health_manager]\ncontroller_ip_port_list = \n", func(c *Config) any { return c.ControllerIPPortList }, []string{}, nil},
		{"CRLF file", "[haproxy_amphora]\r\nbind_port = 1\r\n", func(c *Config) any { return c.BindPort }, 1, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, warns, err := Load(one(base + tt.in))
			if err != nil {
				t.Fatal(err)
			}
			if got := tt.get(c); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %#v, want %#v", got, tt.want)
			}
			checkWarnings(t, warns, tt.warns)
		})
	}
}

func withSources(c Config, name string, edit func(*Config)) Config {
	c.Sources = []string{name}
	edit(&c)
	return c
}

// TestLoadErrors: a bad value of an option the API needs fails Load with
// one line naming file, section, key and value.
func TestLoadErrors(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{"inline comment on an API option", "[haproxy_amphora]\nbind_port = 9443 # x\n", `t.conf: [haproxy_amphora] bind_port = "9443 # x": must be an integer`},
		{"port 0", "[haproxy_amphora]\nbind_port = 0\n", `t.conf: [haproxy_amphora] bind_port = "0": must be between 1 and 65535`},
		{"port too big", "[haproxy-amphora]\nbind-port = 65536\n", `t.conf: [haproxy_amphora] bind_port = "65536": must be between 1 and 65535`},
		{"bind host name", "[haproxy_amphora]\nbind_host = localhost\n", `t.conf: [haproxy_amphora] bind_host = "localhost": must be an IPv4 or IPv6 address`},
		{"bracketed bind host", "[haproxy_amphora]\nbind_host = [::1]\n", `t.conf: [haproxy_amphora] bind_host = "[::1]": must be an IPv4 or IPv6 address`},
		{"bool", "[DEFAULT]\ndebug = maybe\n", `t.conf: [DEFAULT] debug = "maybe": must be a boolean (true/false, yes/no, on/off, 1/0)`},
		{"empty bool", "[DEFAULT]\nuse_syslog =\n", `t.conf: [DEFAULT] use_syslog = "": must be a boolean (true/false, yes/no, on/off, 1/0)`},
		{"facility name", "[DEFAULT]\nsyslog_log_facility = LOG_BOGUS\n", `t.conf: [DEFAULT] syslog_log_facility = "LOG_BOGUS": must be a syslog facility such as LOG_USER, LOG_DAEMON or LOG_LOCAL0..LOG_LOCAL7`},
		{"relative path", "[haproxy_amphora]\nbase_path = var/lib/octavia\n", `t.conf: [haproxy_amphora] base_path = "var/lib/octavia": must be an absolute path`},
		{"empty path", "[amphora_agent]\nagent_server_ca =\n", `t.conf: [amphora_agent] agent_server_ca = "": must be an absolute path`},
		{"multi-line path", "[amphora_agent]\nagent_server_cert = /a\n  /b\n", `t.conf: [amphora_agent] agent_server_cert = "/a\n/b": must be an absolute path`},
		{"relative extension path", "[amphora_agent]\npci_rescan_file = rescan\n", `t.conf: [amphora_agent] pci_rescan_file = "rescan": must be an absolute path`},
		{"zero timeout", "[amphora_agent]\nagent_request_read_timeout = 0\n", `t.conf: [amphora_agent] agent_request_read_timeout = "0": must be at least 1`},
		{"huge timeout", "[amphora_agent]\nagent_request_read_timeout = 99999999999999999999\n", `t.conf: [amphora_agent] agent_request_read_timeout = "99999999999999999999": integer out of range`},
		{"TLS version", "[amphora_agent]\nagent_tls_protocol = TLSv1.4\n", `t.conf: [amphora_agent] agent_tls_protocol = "TLSv1.4": must be one of SSLv3, TLSv1, TLSv1.1, TLSv1.2, TLSv1.3`},
		{"TLS version case", "[amphora_agent]\nagent_tls_protocol = tlsv1.2\n", `t.conf: [amphora_agent] agent_tls_protocol = "tlsv1.2": must be one of SSLv3, TLSv1, TLSv1.1, TLSv1.2, TLSv1.3`},
		{"facility 8", "[amphora_agent]\nadministrative_log_facility = 8\n", `t.conf: [amphora_agent] administrative_log_facility = "8": must be between 0 and 7`},
		{"upload size", "[amphora_agent]\nmax_upload_size = 0\n", `t.conf: [amphora_agent] max_upload_size = "0": must be greater than 0`},
		{"namespace traversal", "[amphora_agent]\nnetwork_namespace = ../x\n", `t.conf: [amphora_agent] network_namespace = "../x": must be 1 to 64 characters of A-Z, a-z, 0-9, '_', '.', '-' (not . or ..)`},
		{"namespace dotdot", "[amphora_agent]\nnetwork_namespace = ..\n", `t.conf: [amphora_agent] network_namespace = "..": must be 1 to 64 characters of A-Z, a-z, 0-9, '_', '.', '-' (not . or ..)`},
		{"namespace too long", "[amphora_agent]\nnetwork_namespace = " + strings.Repeat("n", 65) + "\n", `t.conf: [amphora_agent] network_namespace = "` + strings.Repeat("n", 65) + `": must be 1 to 64 characters of A-Z, a-z, 0-9, '_', '.', '-' (not . or ..)`},
		{"respawn count", "[haproxy_amphora]\nrespawn_count = -1\n", `t.conf: [haproxy_amphora] respawn_count = "-1": must be at least 0`},
		{"respawn interval", "[haproxy_amphora]\nrespawn_interval = -1\n", `t.conf: [haproxy_amphora] respawn_interval = "-1": must be at least 0`},
		{"topology", "[controller_worker]\nloadbalancer_topology = ACTIVE-PASSIVE\n", `t.conf: [controller_worker] loadbalancer_topology = "ACTIVE-PASSIVE": must be SINGLE or ACTIVE_STANDBY`},
		{"substitution refused", "[haproxy_amphora]\nbase_path = $state/x\n", `t.conf: [haproxy_amphora] base_path = "$state/x": substitution of "$state" is not supported (write $$ or \$ for a literal $)`},
		{"group substitution refused", "[haproxy_amphora]\nbase_cert_dir = ${haproxy_amphora.base_path}/certs\n", `t.conf: [haproxy_amphora] base_cert_dir = "${haproxy_amphora.base_path}/certs": substitution of "${haproxy_amphora.base_path}" is not supported (write $$ or \$ for a literal $)`},
		{"first bad value is reported", "[DEFAULT]\ndebug = x\n[haproxy_amphora]\nbind_port = y\n", `t.conf: [DEFAULT] debug = "x": must be a boolean (true/false, yes/no, on/off, 1/0)`},
		{"key before section", "# hi\ndebug = true\n", "t.conf:2: option before any [section]"},
		{"garbage line", "[DEFAULT]\ndebug = true\nnot an option\n", `t.conf:3: not a section, comment or "key = value" line`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Errors come before anything in base is read, except for the
			// syntax cases, which do not use base.
			in := base + tt.in
			if !strings.HasPrefix(tt.want, "t.conf: ") {
				in = tt.in
			}
			c, _, err := Load(one(in))
			if err == nil || err.Error() != tt.want {
				t.Fatalf("err = %v\nwant  %s", err, tt.want)
			}
			if c != nil {
				t.Error("config returned with an error")
			}
		})
	}
}

func TestValueErrorFields(t *testing.T) {
	_, _, err := Load(one("[DEFAULT]\n\n[haproxy_amphora]\nbind_port = 9443 # x\n"))
	var ve *ValueError
	if !errors.As(err, &ve) {
		t.Fatalf("err = %v, want *ValueError", err)
	}
	want := ValueError{Source: "t.conf", Line: 4, Section: "haproxy_amphora", Key: "bind_port", Value: "9443 # x", Reason: "must be an integer"}
	if *ve != want {
		t.Errorf("got %+v\nwant %+v", *ve, want)
	}
}

// TestProvenance: the message names the file (and line) the winning value
// came from.
func TestProvenance(t *testing.T) {
	tests := []struct {
		name     string
		a, b     string
		wantErr  string
		wantLine int
	}{
		{"bad value in the second file", "[haproxy_amphora]\nbind_port = 1\n", "\n\n[haproxy_amphora]\nbind_port = x\n", `b.conf: [haproxy_amphora] bind_port = "x": must be an integer`, 4},
		{"bad value in the first file", "[haproxy_amphora]\nbind_port = x\n", "[haproxy_amphora]\nbind_host = ::1\n", `a.conf: [haproxy_amphora] bind_port = "x": must be an integer`, 2},
		{"second file overrides a bad value", "[haproxy_amphora]\nbind_port = x\n", "[haproxy-amphora]\nbind-port = 1\n", "", 0},
		{"syntax error in the second file", "[DEFAULT]\n", "[DEFAULT]\n\n\n???\n", `b.conf:4: not a section, comment or "key = value" line`, 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srcs := []Source{{"a.conf", []byte(tt.a)}, {"b.conf", []byte(tt.b)}}
			c, _, err := Load(srcs)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				if c.BindPort != 1 || !slices.Equal(c.Sources, []string{"a.conf", "b.conf"}) {
					t.Errorf("BindPort %d, Sources %q", c.BindPort, c.Sources)
				}
				return
			}
			if err == nil || err.Error() != tt.wantErr {
				t.Fatalf("err = %v\nwant  %s", err, tt.wantErr)
			}
			var ve *ValueError
			var pe *ParseError
			switch {
			case errors.As(err, &ve):
				if ve.Line != tt.wantLine {
					t.Errorf("line %d, want %d", ve.Line, tt.wantLine)
				}
			case errors.As(err, &pe):
				if pe.Line != tt.wantLine {
					t.Errorf("line %d, want %d", pe.Line, tt.wantLine)
				}
			default:
				t.Errorf("error type %T", err)
			}
		})
	}
}

func TestLastValueWinsAcrossSources(t *testing.T) {
	srcs := []Source{
		{"a.conf", []byte("[haproxy_amphora]\nbind_port = 1\nbase_path = /a\n[health_manager]\nheartbeat_key = first\n")},
		{"b.conf", []byte("[haproxy-amphora]\nbind-port = 2\n[Health_Manager]\nheartbeat_key = second\n")},
	}
	c, _, err := Load(srcs)
	if err != nil {
		t.Fatal(err)
	}
	if c.BindPort != 2 || c.BasePath != "/a" || c.HeartbeatKey != "second" {
		t.Errorf("BindPort %d BasePath %q HeartbeatKey %q", c.BindPort, c.BasePath, c.HeartbeatKey)
	}
}

// TestHeartbeatLeniency: bad heartbeat options only warn under Load, like
// upstream where they break nothing but the heartbeat; LoadStrict turns
// the invalid values (not the unset ones) into errors.
func TestHeartbeatLeniency(t *testing.T) {
	tests := []struct {
		name      string
		in        string // appended to base
		get       func(*Config) any
		want      any
		warns     []string
		strictErr string // "" when LoadStrict accepts it
	}{
		{
			name: "inline comment on heartbeat_interval", in: "[health_manager]\nheartbeat_interval = 10 # s\n",
			get: func(c *Config) any { return c.HeartbeatInterval }, want: 10 * time.Second,
			warns:     []string{`t.conf: [health_manager] heartbeat_interval = "10 # s": must be an integer; using the default 10s`},
			strictErr: `t.conf: [health_manager] heartbeat_interval = "10 # s": must be an integer`,
		},
		{
			name: "bad interval keeps the default", in: "[health_manager]\nheartbeat_interval = ten\n",
			get: func(c *Config) any { return c.HeartbeatInterval }, want: 10 * time.Second,
			warns:     []string{"must be an integer; using the default 10s"},
			strictErr: `t.conf: [health_manager] heartbeat_interval = "ten": must be an integer`,
		},
		{
			name: "zero interval clamped", in: "[health_manager]\nheartbeat_interval = 0\n",
			get: func(c *Config) any { return c.HeartbeatInterval }, want: time.Second,
			warns:     []string{`heartbeat_interval = "0": must be at least 1; using 1s`},
			strictErr: `t.conf: [health_manager] heartbeat_interval = "0": must be at least 1`,
		},
		{
			name: "negative interval clamped", in: "[health_manager]\nheartbeat_interval = -5\n",
			get: func(c *Config) any { return c.HeartbeatInterval }, want: time.Second,
			warns:     []string{"must be at least 1; using 1s"},
			strictErr: `t.conf: [health_manager] heartbeat_interval = "-5": must be at least 1`,
		},
		{
			name: "bad list items skipped",
			in:   "[health_manager]\ncontroller_ip_port_list = 192.0.2.1:5555, nocolon,192.0.2.2:99999 , [2001:db8::1]:5555, 2001:db8::2:5555, fe80::1%eth0:5555, hm.example:5555, :5555, [2001:db8::3], ,\n",
			get:  func(c *Config) any { return c.ControllerIPPortList },
			want: []string{"192.0.2.1:5555", "[2001:db8::1]:5555", "[2001:db8::2]:5555", "[fe80::1%eth0]:5555", "hm.example:5555"},
			warns: []string{
				`item "nocolon": expected host:port; item skipped`,
				`item "192.0.2.2:99999": port must be between 1 and 65535; item skipped`,
				`item ":5555": empty host; item skipped`,
				`item "[2001:db8::3]": invalid host; item skipped`,
			},
			strictErr: `item "nocolon": expected host:port`,
		},
		{
			name: "host with a space", in: "[health_manager]\ncontroller_ip_port_list = a b:1\n",
			get: func(c *Config) any { return len(c.ControllerIPPortList) }, want: 0,
			warns:     []string{`item "a b:1": invalid host; item skipped`},
			strictErr: `item "a b:1": invalid host`,
		},
		{
			name: "substitution in the list", in: "[health_manager]\ncontroller_ip_port_list = $hm:5555\n",
			get: func(c *Config) any { return len(c.ControllerIPPortList) }, want: 0,
			warns:     []string{`substitution of "$hm" is not supported (write $$ or \$ for a literal $); no heartbeat destinations`},
			strictErr: `substitution of "$hm"`,
		},
		{
			name: "unset heartbeat key", in: "[health_manager]\nheartbeat_key = None\n",
			get: func(c *Config) any { return c.HeartbeatKey }, want: "None",
			warns: []string{`[health_manager] heartbeat_key is not set; heartbeats are signed with the key "None", like upstream`},
		},
		{
			name: "substitution in the key is masked", in: "[health_manager]\nheartbeat_key = t0p$secret\n",
			get: func(c *Config) any { return c.HeartbeatKey }, want: "None",
			warns:     []string{`t.conf: [health_manager] heartbeat_key = "***": substitution of "$secret" is not supported`},
			strictErr: `t.conf: [health_manager] heartbeat_key = "***": substitution`,
		},
		{
			name: "amphora_id substitution", in: "[amphora_agent]\namphora_id = $id\n",
			get: func(c *Config) any { return c.AmphoraID }, want: "",
			warns:     []string{`amphora_id = "$id": substitution of "$id" is not supported (write $$ or \$ for a literal $); heartbeats carry no amphora ID`},
			strictErr: `amphora_id = "$id"`,
		},
		{
			name: "notices are not errors in strict mode", in: "[amphora_agent]\nagent_tls_protocol = TLSv1.1\namphora_udp_driver = x\n[haproxy_amphora]\nuser_log_facility = 5\n",
			get: func(c *Config) any { return c.TLSMinVersion }, want: uint16(tls.VersionTLS12),
			warns: []string{"amphora_udp_driver", "user_log_facility"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, warns, err := Load(one(base + tt.in))
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			if got := tt.get(c); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %#v, want %#v", got, tt.want)
			}
			checkWarnings(t, warns, tt.warns)
			if strings.Contains(strings.Join(warns, "\n"), "t0p") {
				t.Error("heartbeat key leaked into a warning")
			}

			sc, _, serr := LoadStrict(one(base + tt.in))
			if tt.strictErr == "" {
				if serr != nil || sc == nil {
					t.Fatalf("LoadStrict: %v", serr)
				}
				return
			}
			if serr == nil || !strings.Contains(serr.Error(), tt.strictErr) || strings.Contains(serr.Error(), "; ") {
				t.Fatalf("LoadStrict err = %v, want one containing %q", serr, tt.strictErr)
			}
			if sc != nil {
				t.Error("LoadStrict returned a config with an error")
			}
		})
	}
}

// TestUnsetOptions: start-up runs on the defaults; a replacement must set
// what every controller writes.
func TestUnsetOptions(t *testing.T) {
	c, warns, err := Load(nil)
	if err != nil {
		t.Fatal(err)
	}
	want := *defaults()
	want.Sources = []string{}
	if !reflect.DeepEqual(*c, want) {
		t.Errorf("got %+v\nwant %+v", *c, want)
	}
	checkWarnings(t, warns, []string{"[amphora_agent] amphora_id is not set", "[health_manager] heartbeat_key is not set"})
	if c.HeartbeatKey != "None" {
		t.Errorf("HeartbeatKey = %q", c.HeartbeatKey)
	}

	cases := []struct{ name, in, want string }{
		{"empty file", "", `t.conf: [health_manager] controller_ip_port_list and [health_manager] heartbeat_key are not set`},
		{"no list", "[health_manager]\nheartbeat_key = k\n", `t.conf: [health_manager] controller_ip_port_list is not set`},
		{"no key", "[health_manager]\ncontroller_ip_port_list = 192.0.2.1:5555\n", `t.conf: [health_manager] heartbeat_key is not set`},
	}
	for _, tc := range cases {
		if c, _, err := LoadStrict(one(tc.in)); c != nil || err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: LoadStrict = %v, %v; want an error containing %q", tc.name, c, err, tc.want)
		}
	}
	// What a controller writes when it has neither is complete.
	if _, _, err := LoadStrict(one("[health_manager]\ncontroller_ip_port_list =\nheartbeat_key = None\n")); err != nil {
		t.Errorf("empty list and key None: %v", err)
	}
	// Set in any of the files is set.
	if _, _, err := LoadStrict(append(one("[health_manager]\ncontroller_ip_port_list =\n"), Source{Name: "b.conf", Data: []byte("[health_manager]\nheartbeat_key = k\n")})); err != nil {
		t.Errorf("options split across files: %v", err)
	}
}

// Golden files. controller-11.0.0.conf and controller-master.conf were
// produced by testdata/render_agent_conf.py: the first through Debian's
// python3-octavia 11.0.0 AgentJinjaTemplater (its packaged template and
// option defaults, autoescaping on), the second by rendering the upstream
// master template (git show HEAD:octavia/amphorae/backends/agent/
// templates/amphora_agent_conf.template) with jinja2 and the same context.
// spec-5.4.conf is the file of health-and-config.md section 5.4 verbatim.
func TestGoldenFiles(t *testing.T) {
	tests := []struct {
		file  string
		edit  func(*Config)
		warns []string
	}{
		{
			file: "spec-5.4.conf",
			edit: func(c *Config) {
				c.UseSyslog = true
				c.SyslogFacility = "LOG_LOCAL1"
				c.AmphoraID = "9d2b6e1c-4f3a-4c8e-8b7d-2a1e5f6c7d80"
				c.ControllerIPPortList = []string{"192.0.2.10:5555", "192.0.2.11:5555"}
				c.HeartbeatKey = "insecure"
			},
		},
		{
			file: "controller-11.0.0.conf",
			edit: func(c *Config) {
				c.Debug = true
				c.UseSyslog = true
				c.SyslogFacility = "LOG_LOCAL3"
				c.AmphoraID = "2f4c1f7e-8a3b-4b6e-9d0c-5e7a1b2c3d4e"
				c.ControllerIPPortList = []string{"192.0.2.10:5555", "[2001:db8::11]:5555"}
				c.HeartbeatKey = "insecure"
				c.Topology = TopologyActiveStandby
			},
			// The controller's facility 3 lands in [haproxy_amphora],
			// which upstream does not read (spec 5.5).
			warns: []string{
				`[haproxy_amphora] administrative_log_facility = "3": ignored, like upstream`,
				`[haproxy_amphora] user_log_facility = "2": ignored, like upstream`,
			},
		},
		{
			file: "controller-master.conf",
			edit: func(c *Config) {
				c.UseSyslog = true
				c.SyslogFacility = "LOG_LOCAL1"
				c.AmphoraID = "7c9e6679-7425-40de-944b-e07fc1f90ae7"
				c.ControllerIPPortList = []string{"192.0.2.10:5555", "[2001:db8::11]:5555"}
				// Autoescaped by the controller; used as written.
				c.HeartbeatKey = `s3cr&amp;t&lt;k&gt;&#34;&#39;`
			},
		},
		{
			file: "operator-dashes.conf",
			edit: func(c *Config) {
				c.Debug = true
				c.SyslogFacility = "LOG_LOCAL4"
				c.BaseCertDir = "/srv/octavia/certs"
				c.BindPort = 8443
				c.BindHost = "192.0.2.5"
				c.ControllerIPPortList = []string{"hm1.example.net:5555", "[2001:db8::5]:5556"}
				c.HeartbeatKey = "operator secret"
				c.HeartbeatInterval = 5 * time.Second
				c.Topology = TopologyActiveStandby
				c.AmphoraID = "0b8e2ce6-0c8b-4c1d-9f3e-6a1d2b3c4d5e"
				c.TLSProtocol = "TLSv1.3"
				c.TLSMinVersion = tls.VersionTLS13
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			path := filepath.Join("testdata", tt.file)
			srcs, err := ReadFiles([]string{path})
			if err != nil {
				t.Fatal(err)
			}
			for _, load := range []func([]Source) (*Config, []string, error){Load, LoadStrict} {
				c, warns, err := load(srcs)
				if err != nil {
					t.Fatal(err)
				}
				want := *defaults()
				want.Sources = []string{path}
				tt.edit(&want)
				if !reflect.DeepEqual(*c, want) {
					t.Errorf("got  %+v\nwant %+v", *c, want)
				}
				checkWarnings(t, warns, tt.warns)
			}
		})
	}
}

func TestOperatorFileHelpers(t *testing.T) {
	srcs, err := ReadFiles([]string{"testdata/operator-dashes.conf"})
	if err != nil {
		t.Fatal(err)
	}
	c, _, err := Load(srcs)
	if err != nil {
		t.Fatal(err)
	}
	if !c.ActiveStandby() || c.ListenAddress() != "192.0.2.5:8443" {
		t.Errorf("ActiveStandby %v ListenAddress %q", c.ActiveStandby(), c.ListenAddress())
	}
}

func TestReadFiles(t *testing.T) {
	dir := t.TempDir()
	a := filepath.Join(dir, "a.conf")
	if err := os.WriteFile(a, []byte("[DEFAULT]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	srcs, err := ReadFiles([]string{a})
	if err != nil || len(srcs) != 1 || srcs[0].Name != a || string(srcs[0].Data) != "[DEFAULT]\n" {
		t.Fatalf("ReadFiles = %+v, %v", srcs, err)
	}
	missing := filepath.Join(dir, "missing.conf")
	if _, err := ReadFiles([]string{a, missing}); err == nil || !strings.Contains(err.Error(), missing) {
		t.Errorf("err = %v, want one naming %s", err, missing)
	}
	if _, err := ReadFiles([]string{dir}); err == nil || !strings.Contains(err.Error(), dir) {
		t.Errorf("err = %v, want one naming %s", err, dir)
	}
}

// TestOptionsTable keeps Options() true: it lists exactly what Load reads,
// and writing every documented default explicitly changes nothing.
func TestOptionsTable(t *testing.T) {
	l, _, err := run(nil)
	if err != nil {
		t.Fatal(err)
	}
	listed := map[[2]string]bool{}
	var b strings.Builder
	section := ""
	for _, o := range Options() {
		k := [2]string{o.Section, o.Key}
		if listed[k] {
			t.Errorf("%v listed twice", k)
		}
		listed[k] = true
		if !l.seen[k] {
			t.Errorf("%v listed but never read", k)
		}
		if o.Help == "" {
			t.Errorf("%v has no help", k)
		}
		if o.Key == "amphora_id" {
			continue // no default
		}
		if o.Section != section {
			section = o.Section
			fmt.Fprintf(&b, "[%s]\n", section)
		}
		def := o.Default
		if o.Key == "heartbeat_key" {
			def = "None" // how a controller writes it unset
		}
		fmt.Fprintf(&b, "%s = %s\n", o.Key, def)
	}
	for k := range l.seen {
		if !listed[k] {
			t.Errorf("%v read but not listed", k)
		}
	}

	c, warns, err := LoadStrict(one(b.String()))
	if err != nil {
		t.Fatalf("%v\n%s", err, b.String())
	}
	want := *defaults()
	want.Sources = []string{"t.conf"}
	if !reflect.DeepEqual(*c, want) {
		t.Errorf("explicit defaults give %+v\nwant %+v", *c, want)
	}
	checkWarnings(t, warns, []string{"amphora_id is not set", "heartbeat_key is not set"})
}

// Load builds its own viper instance and codec, so concurrent calls (e.g.
// a PUT /1.0/config validation during a reload) do not interfere. Run
// with -race.
func TestLoadConcurrent(t *testing.T) {
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			port := 1000 + i
			c, _, err := Load(one(fmt.Sprintf("[haproxy_amphora]\nbind_port = %d\n", port)))
			if err != nil || c.BindPort != port {
				t.Errorf("got %v, %v; want port %d", c, err, port)
			}
		})
	}
	wg.Wait()
}
