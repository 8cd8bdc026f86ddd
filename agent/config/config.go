// Package config loads the agent's configuration,
// /etc/octavia/amphora-agent.conf, written by the Octavia controller in
// oslo.config's INI dialect, into a typed, defaulted and validated Config.
//
// Options the API needs are strict: a bad value is an error, since serving
// with a guessed value would be worse than not starting. Heartbeat options
// are lenient like upstream, where a bad value only breaks the heartbeat
// sender: it is a warning and the default is used instead.
package config

import (
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/spf13/viper"
)

// Values of Config.Topology.
const (
	TopologySingle        = "SINGLE"
	TopologyActiveStandby = "ACTIVE_STANDBY"
)

// Source is the content of one configuration file.
type Source struct {
	Name string // file path, used in messages
	Data []byte
}

// ReadFiles reads the given files, in order.
func ReadFiles(paths []string) ([]Source, error) {
	out := make([]Source, 0, len(paths))
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			var pe *fs.PathError
			if errors.As(err, &pe) && pe.Path == p {
				return nil, fmt.Errorf("cannot read config file: %w", err)
			}
			return nil, fmt.Errorf("cannot read config file %s: %w", p, err)
		}
		out = append(out, Source{Name: p, Data: data})
	}
	return out, nil
}

// Config is the agent's configuration. Field comments name the option and
// its default.
type Config struct {
	Sources []string // names of the sources loaded, in order

	// [DEFAULT]
	Debug          bool   // debug (false)
	UseSyslog      bool   // use_syslog (false)
	SyslogFacility string // syslog_log_facility (LOG_USER), canonical "LOG_X"

	// [amphora_agent]
	AmphoraID                 string        // amphora_id ("" when unset)
	ServerCA                  string        // agent_server_ca
	ServerCert                string        // agent_server_cert
	NetworkDir                string        // agent_server_network_dir
	RequestReadTimeout        time.Duration // agent_request_read_timeout (180s)
	TLSProtocol               string        // agent_tls_protocol as written (TLSv1.2)
	TLSMinVersion             uint16        // tls.VersionTLS12, or tls.VersionTLS13 for TLSv1.3
	AdministrativeLogFacility int           // administrative_log_facility (1)
	UserLogFacility           int           // user_log_facility (0)
	// Extensions: values upstream hard-codes, with upstream's values as
	// defaults.
	MaxUploadBytes        int64  // max_upload_size (64 MiB)
	Namespace             string // network_namespace (amphora-haproxy)
	PluggedInterfacesFile string // plugged_interfaces_file
	NftablesRulesFile     string // nftables_rules_file
	HAProxyUserGroupFile  string // haproxy_user_group_file
	PCIRescanFile         string // pci_rescan_file
	LVSMasqueradeScript   string // lvs_masquerade_script
	KeepalivedCmd         string // keepalived_cmd
	PrometheusProxy       string // prometheus_proxy_address (127.0.0.1:9102), in the namespace
	PrometheusExporter    string // prometheus_exporter_address (127.0.0.1:9101), in the namespace

	// [haproxy_amphora]
	BasePath        string        // base_path
	BaseCertDir     string        // base_cert_dir
	BindHost        string        // bind_host (::), an IP literal
	BindPort        int           // bind_port (9443)
	HAProxyCmd      string        // haproxy_cmd
	RespawnCount    int           // respawn_count (2)
	RespawnInterval time.Duration // respawn_interval (2s)

	// [health_manager]
	// ControllerIPPortList holds the valid items of controller_ip_port_list
	// in net.JoinHostPort form ("192.0.2.1:5555", "[2001:db8::1]:5555"),
	// ready for net.ResolveUDPAddr.
	ControllerIPPortList []string
	HeartbeatInterval    time.Duration // heartbeat_interval (10s), at least 1s
	HeartbeatKey         string        // heartbeat_key, verbatim; "None" when unset

	// [controller_worker]
	Topology string // loadbalancer_topology: TopologySingle or TopologyActiveStandby
}

// ActiveStandby tells whether the amphora is one of a VRRP pair.
func (c *Config) ActiveStandby() bool { return c.Topology == TopologyActiveStandby }

// WeakTLSProtocol tells whether agent_tls_protocol names a version below
// TLS 1.2 (SSLv3, TLSv1, TLSv1.1), which the API does not offer:
// TLSMinVersion is TLS 1.2 then.
func (c *Config) WeakTLSProtocol() bool {
	switch c.TLSProtocol {
	case "SSLv3", "TLSv1", "TLSv1.1":
		return true
	}
	return false
}

// ListenAddress is the API's listen address for net.Listen.
func (c *Config) ListenAddress() string {
	return net.JoinHostPort(c.BindHost, strconv.Itoa(c.BindPort))
}

func defaults() *Config {
	return &Config{
		SyslogFacility: defaultSyslogFacility,

		ServerCA:                  defaultServerCA,
		ServerCert:                defaultServerCert,
		NetworkDir:                defaultNetworkDir,
		RequestReadTimeout:        defaultRequestReadTimeout * time.Second,
		TLSProtocol:               defaultTLSProtocol,
		TLSMinVersion:             tls.VersionTLS12,
		AdministrativeLogFacility: defaultAdminLogFacility,
		UserLogFacility:           defaultUserLogFacility,
		MaxUploadBytes:            defaultMaxUploadBytes,
		Namespace:                 defaultNamespace,
		PluggedInterfacesFile:     defaultPluggedInterfaces,
		NftablesRulesFile:         defaultNftablesRules,
		HAProxyUserGroupFile:      defaultHAProxyUserGroup,
		PCIRescanFile:             defaultPCIRescan,
		LVSMasqueradeScript:       defaultLVSMasquerade,
		KeepalivedCmd:             defaultKeepalivedCmd,
		PrometheusProxy:           defaultPrometheusProxy,
		PrometheusExporter:        defaultPrometheusExporter,

		BasePath:        defaultBasePath,
		BaseCertDir:     defaultBaseCertDir,
		BindHost:        defaultBindHost,
		BindPort:        defaultBindPort,
		HAProxyCmd:      defaultHAProxyCmd,
		RespawnCount:    defaultRespawnCount,
		RespawnInterval: defaultRespawnInterval * time.Second,

		ControllerIPPortList: []string{},
		HeartbeatInterval:    defaultHeartbeatInterval * time.Second,
		HeartbeatKey:         unsetHeartbeatKey,

		Topology: defaultTopology,
	}
}

// ValueError is a bad option value, with where it was written.
type ValueError struct {
	Source  string
	Line    int
	Section string // "DEFAULT" or the normalised group name
	Key     string // normalised option name
	Value   string // as written; secrets are masked
	Reason  string
}

func (e *ValueError) Error() string {
	return fmt.Sprintf("%s: [%s] %s = %q: %s", e.Source, e.Section, e.Key, e.Value, e.Reason)
}

// Load merges sources in order (later values win) and returns the
// configuration. A bad value of an option the API needs is an error, in
// the form `<file>: [<section>] <key> = "<value>": <reason>`; see the
// package comment for what only gives warnings.
func Load(sources []Source) (*Config, []string, error) {
	return load(sources, false)
}

// LoadStrict is Load, except that a warning caused by an invalid value is
// an error too (warnings about unset or deprecated options stay warnings),
// and so is leaving out an option of ReplacementRequired. It validates a
// configuration that is to replace the one in force (PUT /1.0/config,
// SIGHUP).
func LoadStrict(sources []Source) (*Config, []string, error) {
	return load(sources, true)
}

// ReplacementRequired are the options every controller-rendered file sets
// (spec 5.4 and 5.5: no health managers is written as an empty list, an
// unset key as None). A file without them is not one a controller wrote,
// typically an empty or truncated one, and in force it would stop
// heartbeats or sign them with the key "None", so LoadStrict refuses it.
// Start-up (Load) still runs on the defaults: there is nothing else to run
// on, and the API stays up for the controller to put a good file.
var ReplacementRequired = [][2]string{{secHealth, "controller_ip_port_list"}, {secHealth, "heartbeat_key"}}

func load(sources []Source, strict bool) (*Config, []string, error) {
	l, cfg, err := run(sources)
	if err != nil {
		return nil, nil, err
	}
	if l.err != nil {
		return nil, l.warnings, l.err
	}
	if strict && len(l.invalid) > 0 {
		return nil, l.warnings, l.invalid[0]
	}
	if strict {
		if err := l.requireSet(cfg.Sources, ReplacementRequired); err != nil {
			return nil, l.warnings, err
		}
	}
	return cfg, l.warnings, nil
}

// requireSet fails unless every option of opts is written in some source.
func (l *loader) requireSet(sources []string, opts [][2]string) error {
	var missing []string
	for _, o := range opts {
		if _, ok := l.lookup(o[0], o[1]); !ok {
			missing = append(missing, "["+o[0]+"] "+o[1])
		}
	}
	if len(missing) == 0 {
		return nil
	}
	where := strings.Join(sources, ", ")
	if where == "" {
		where = "no configuration file"
	}
	verb, pronoun := "is", "it"
	if len(missing) > 1 {
		verb, pronoun = "are", "them"
	}
	return fmt.Errorf("%s: %s %s not set; a controller always writes %s (an empty list, or None, when there is no value), so this is not a complete amphora-agent.conf",
		where, strings.Join(missing, " and "), verb, pronoun)
}

// codecFormat is the format name the codec is registered under. Viper
// 1.21 refuses formats missing from its global SupportedExts before it
// consults the registry, so a private name like "oslo" cannot be used
// without changing that global; our registry's "ini" entry wins over
// viper's own.
const codecFormat = "ini"

// run parses every source once and reads all options. A syntax error is
// returned directly; value problems are left in the loader.
func run(sources []Source) (*loader, *Config, error) {
	codec := newOsloCodec()
	reg := viper.NewCodecRegistry()
	if err := reg.RegisterCodec(codecFormat, codec); err != nil {
		return nil, nil, err
	}
	v := viper.NewWithOptions(viper.WithCodecRegistry(reg))
	v.SetConfigType(codecFormat)

	names := make([]string, 0, len(sources))
	for _, s := range sources {
		name := s.Name
		if name == "" {
			name = "<unnamed>"
		}
		codec.source = name
		if err := v.MergeConfig(bytes.NewReader(s.Data)); err != nil {
			var pe *ParseError
			if errors.As(err, &pe) {
				return nil, nil, pe
			}
			return nil, nil, fmt.Errorf("%s: %w", name, err)
		}
		names = append(names, name)
	}

	l := &loader{v: v, origins: codec.origins, seen: map[[2]string]bool{}}
	cfg := l.fill()
	cfg.Sources = names
	return l, cfg, nil
}

// severity says what a bad value does.
type severity int

const (
	fatal   severity = iota // options the API needs: Load fails
	lenient                 // heartbeat options: warning, default kept
)

type loader struct {
	v        *viper.Viper
	origins  map[string]map[string]origin
	warnings []string
	invalid  []error // lenient bad values; errors for LoadStrict
	err      error   // first fatal bad value
	seen     map[[2]string]bool
}

// setting is one option's winning value as written (quotes removed, not
// yet interpolated).
type setting struct {
	section, key string
	raw          string
	origin       origin
}

// lookup finds an option; ok is false when no source sets it.
func (l *loader) lookup(section, key string) (s setting, ok bool) {
	l.seen[[2]string{section, key}] = true
	vsec := section
	if section == secDefault {
		vsec = "default"
	}
	raw, ok := l.v.Get(vsec + viperKeyDelim + key).(string)
	if !ok {
		return setting{}, false
	}
	return setting{section, key, raw, l.origins[vsec][key]}, true
}

// secrets are never repeated in messages.
var secrets = map[[2]string]bool{{secHealth, "heartbeat_key"}: true}

func (l *loader) valueError(s setting, reason string) *ValueError {
	val := s.raw
	if secrets[[2]string{s.section, s.key}] {
		val = "***"
	}
	return &ValueError{
		Source: s.origin.Source, Line: s.origin.Line,
		Section: s.section, Key: s.key, Value: val, Reason: reason,
	}
}

// bad records an invalid value. fallback says, for a lenient option, what
// is used instead.
func (l *loader) bad(sev severity, s setting, reason, fallback string) {
	e := l.valueError(s, reason)
	if sev == fatal {
		if l.err == nil {
			l.err = e
		}
		return
	}
	l.invalid = append(l.invalid, e)
	l.warnings = append(l.warnings, e.Error()+"; "+fallback)
}

// note records a warning that is not about an invalid value.
func (l *loader) note(s setting, msg string) {
	l.warnings = append(l.warnings, l.valueError(s, msg).Error())
}

// isNone tells whether a value is the literal None, which every option
// treats as unset: controllers render an unset option that way.
func isNone(s setting) bool { return s.raw == "None" }

// read sets *dst from an option when it is set to a valid value. On an
// invalid value *dst keeps its default. It returns the setting and
// whether *dst was changed.
func read[T any](l *loader, sev severity, section, key string, dst *T, parse func(string) (T, error)) (setting, bool) {
	s, ok := l.lookup(section, key)
	if !ok || isNone(s) {
		return s, false
	}
	val, err := interpolate(s.raw)
	if err == nil {
		var x T
		if x, err = parse(val); err == nil {
			*dst = x
			return s, true
		}
	}
	l.bad(sev, s, err.Error(), fmt.Sprintf("using the default %v", *dst))
	return s, false
}

func (l *loader) fill() *Config {
	c := defaults()

	read(l, fatal, secDefault, "debug", &c.Debug, parseBool)
	read(l, fatal, secDefault, "use_syslog", &c.UseSyslog, parseBool)
	read(l, fatal, secDefault, "syslog_log_facility", &c.SyslogFacility, parseSyslogFacility)

	l.readAmphoraID(c)
	read(l, fatal, secAgent, "agent_server_ca", &c.ServerCA, parsePath)
	read(l, fatal, secAgent, "agent_server_cert", &c.ServerCert, parsePath)
	read(l, fatal, secAgent, "agent_server_network_dir", &c.NetworkDir, parsePath)
	read(l, fatal, secAgent, "agent_request_read_timeout", &c.RequestReadTimeout, parseSeconds(1))
	// A version below TLS 1.2 is raised to it; the agent, not the loader,
	// warns about it (see WeakTLSProtocol), so that a reload repeating the
	// same value does not warn again.
	if _, ok := read(l, fatal, secAgent, "agent_tls_protocol", &c.TLSProtocol, parseTLSProtocol); ok && c.TLSProtocol == "TLSv1.3" {
		c.TLSMinVersion = tls.VersionTLS13
	}
	read(l, fatal, secAgent, "administrative_log_facility", &c.AdministrativeLogFacility, parseIntRange(0, 7))
	read(l, fatal, secAgent, "user_log_facility", &c.UserLogFacility, parseIntRange(0, 7))
	if s, ok := l.lookup(secAgent, "amphora_udp_driver"); ok && !isNone(s) && strings.TrimSpace(s.raw) != defaultUDPDriver {
		l.note(s, "deprecated and ignored; LVS listeners always use keepalived")
	}
	read(l, fatal, secAgent, "max_upload_size", &c.MaxUploadBytes, parsePositiveInt64)
	read(l, fatal, secAgent, "network_namespace", &c.Namespace, parseNamespace)
	read(l, fatal, secAgent, "plugged_interfaces_file", &c.PluggedInterfacesFile, parsePath)
	read(l, fatal, secAgent, "nftables_rules_file", &c.NftablesRulesFile, parsePath)
	read(l, fatal, secAgent, "haproxy_user_group_file", &c.HAProxyUserGroupFile, parsePath)
	read(l, fatal, secAgent, "pci_rescan_file", &c.PCIRescanFile, parsePath)
	read(l, fatal, secAgent, "lvs_masquerade_script", &c.LVSMasqueradeScript, parsePath)
	read(l, fatal, secAgent, "keepalived_cmd", &c.KeepalivedCmd, parsePath)
	read(l, fatal, secAgent, "prometheus_proxy_address", &c.PrometheusProxy, parseIPPort)
	read(l, fatal, secAgent, "prometheus_exporter_address", &c.PrometheusExporter, parseIPPort)

	read(l, fatal, secHAProxy, "base_path", &c.BasePath, parsePath)
	read(l, fatal, secHAProxy, "base_cert_dir", &c.BaseCertDir, parsePath)
	read(l, fatal, secHAProxy, "bind_host", &c.BindHost, parseIP)
	read(l, fatal, secHAProxy, "bind_port", &c.BindPort, parseIntRange(1, 65535))
	read(l, fatal, secHAProxy, "haproxy_cmd", &c.HAProxyCmd, parsePath)
	read(l, fatal, secHAProxy, "respawn_count", &c.RespawnCount, parseIntRange(0, math.MaxInt32))
	read(l, fatal, secHAProxy, "respawn_interval", &c.RespawnInterval, parseSeconds(0))
	// Rendered by 2024.1 and older controllers; nothing to do with systemd.
	l.lookup(secHAProxy, "use_upstart")
	// Controllers write these here, where upstream never reads them (it
	// reads [amphora_agent]). Follow upstream, but say so when it matters.
	l.checkIgnoredFacility("administrative_log_facility", c.AdministrativeLogFacility)
	l.checkIgnoredFacility("user_log_facility", c.UserLogFacility)

	l.readControllers(c)
	if s, ok := read(l, lenient, secHealth, "heartbeat_interval", &c.HeartbeatInterval, parseSeconds(-maxSeconds)); ok && c.HeartbeatInterval < time.Second {
		c.HeartbeatInterval = time.Second
		l.bad(lenient, s, "must be at least 1", "using 1s")
	}
	l.readHeartbeatKey(c)

	read(l, fatal, secController, "loadbalancer_topology", &c.Topology, parseTopology)
	return c
}

func (l *loader) readAmphoraID(c *Config) {
	s, ok := l.lookup(secAgent, "amphora_id")
	if ok && !isNone(s) {
		id, err := interpolate(s.raw)
		if err != nil {
			l.bad(lenient, s, err.Error(), "heartbeats carry no amphora ID")
			return
		}
		c.AmphoraID = strings.TrimSpace(id)
	}
	if c.AmphoraID == "" {
		l.warnings = append(l.warnings, "["+secAgent+"] amphora_id is not set; heartbeats carry no amphora ID")
	}
}

func (l *loader) readHeartbeatKey(c *Config) {
	s, ok := l.lookup(secHealth, "heartbeat_key")
	if ok && !isNone(s) {
		key, err := interpolate(s.raw)
		if err == nil {
			c.HeartbeatKey = key
			return
		}
		l.bad(lenient, s, err.Error(), `using the key "None"`)
		return
	}
	// Upstream signs with str(None) then; the health manager only accepts
	// that if it is configured the same way.
	l.warnings = append(l.warnings, "["+secHealth+`] heartbeat_key is not set; heartbeats are signed with the key "None", like upstream`)
}

func (l *loader) readControllers(c *Config) {
	s, ok := l.lookup(secHealth, "controller_ip_port_list")
	if !ok || isNone(s) {
		return
	}
	val, err := interpolate(s.raw)
	if err != nil {
		l.bad(lenient, s, err.Error(), "no heartbeat destinations")
		return
	}
	for item := range strings.SplitSeq(val, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		hp, err := parseHostPort(item)
		if err != nil {
			l.bad(lenient, s, fmt.Sprintf("item %q: %v", item, err), "item skipped")
			continue
		}
		c.ControllerIPPortList = append(c.ControllerIPPortList, hp)
	}
}

func (l *loader) checkIgnoredFacility(key string, effective int) {
	s, ok := l.lookup(secHAProxy, key)
	if !ok || isNone(s) {
		return
	}
	if n, err := strconv.Atoi(strings.TrimSpace(s.raw)); err == nil && n == effective {
		return
	}
	l.note(s, fmt.Sprintf("ignored, like upstream: the agent uses [%s] %s (%d)", secAgent, key, effective))
}

func parseBool(s string) (bool, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "true", "1", "on", "yes":
		return true, nil
	case "false", "0", "off", "no":
		return false, nil
	}
	return false, errors.New("must be a boolean (true/false, yes/no, on/off, 1/0)")
}

func parseInt(s string) (int64, error) {
	n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil {
		var ne *strconv.NumError
		if errors.As(err, &ne) && ne.Err == strconv.ErrRange {
			return 0, errors.New("integer out of range")
		}
		return 0, errors.New("must be an integer")
	}
	return n, nil
}

func parseIntRange(lo, hi int) func(string) (int, error) {
	return func(s string) (int, error) {
		n, err := parseInt(s)
		if err != nil {
			return 0, err
		}
		if n < int64(lo) || n > int64(hi) {
			if hi == math.MaxInt32 {
				return 0, fmt.Errorf("must be at least %d", lo)
			}
			return 0, fmt.Errorf("must be between %d and %d", lo, hi)
		}
		return int(n), nil
	}
}

func parsePositiveInt64(s string) (int64, error) {
	n, err := parseInt(s)
	if err != nil {
		return 0, err
	}
	if n <= 0 {
		return 0, errors.New("must be greater than 0")
	}
	return n, nil
}

// maxSeconds keeps a count of seconds within time.Duration.
const maxSeconds = math.MaxInt64 / int64(time.Second)

// parseSeconds reads a whole number of seconds, at least min.
func parseSeconds(min int64) func(string) (time.Duration, error) {
	return func(s string) (time.Duration, error) {
		n, err := parseInt(s)
		if err != nil {
			return 0, err
		}
		if n < min {
			return 0, fmt.Errorf("must be at least %d", min)
		}
		if n > maxSeconds || n < -maxSeconds {
			return 0, errors.New("integer out of range")
		}
		return time.Duration(n) * time.Second, nil
	}
}

func parsePath(s string) (string, error) {
	if s == "" || !filepath.IsAbs(s) || strings.ContainsFunc(s, unicode.IsControl) {
		return "", errors.New("must be an absolute path")
	}
	return s, nil
}

func parseIP(s string) (string, error) {
	if _, err := netip.ParseAddr(s); err != nil {
		return "", errors.New("must be an IPv4 or IPv6 address")
	}
	return s, nil
}

// parseIPPort takes an IP literal and a port, "127.0.0.1:9102" or
// "[::1]:9102".
func parseIPPort(s string) (string, error) {
	ap, err := netip.ParseAddrPort(strings.TrimSpace(s))
	if err != nil || ap.Port() == 0 {
		return "", errors.New("must be an IP address and a port, such as 127.0.0.1:9102")
	}
	return ap.String(), nil
}

func parseTLSProtocol(s string) (string, error) {
	switch s {
	case "SSLv3", "TLSv1", "TLSv1.1", "TLSv1.2", "TLSv1.3":
		return s, nil
	}
	return "", errors.New("must be one of SSLv3, TLSv1, TLSv1.1, TLSv1.2, TLSv1.3")
}

// syslogFacilities are the names oslo.log accepts.
var syslogFacilities = []string{
	"KERN", "USER", "MAIL", "DAEMON", "AUTH", "SYSLOG", "LPR", "NEWS",
	"UUCP", "CRON", "AUTHPRIV", "FTP", "LOCAL0", "LOCAL1", "LOCAL2",
	"LOCAL3", "LOCAL4", "LOCAL5", "LOCAL6", "LOCAL7",
}

func parseSyslogFacility(s string) (string, error) {
	name := strings.TrimPrefix(strings.ToUpper(strings.TrimSpace(s)), "LOG_")
	for _, f := range syslogFacilities {
		if name == f {
			return "LOG_" + f, nil
		}
	}
	return "", errors.New("must be a syslog facility such as LOG_USER, LOG_DAEMON or LOG_LOCAL0..LOG_LOCAL7")
}

func parseTopology(s string) (string, error) {
	switch strings.ReplaceAll(strings.ToUpper(strings.TrimSpace(s)), "-", "_") {
	case TopologySingle:
		return TopologySingle, nil
	case TopologyActiveStandby:
		return TopologyActiveStandby, nil
	}
	return "", errors.New("must be SINGLE or ACTIVE_STANDBY")
}

// parseNamespace accepts names that are safe as a path element under
// /var/run/netns and as a command argument.
func parseNamespace(s string) (string, error) {
	ok := s != "" && len(s) <= namespaceMaxLen && s != "." && s != ".."
	for i := 0; ok && i < len(s); i++ {
		c := s[i]
		ok = 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '.' || c == '-'
	}
	if !ok {
		return "", fmt.Errorf("must be 1 to %d characters of A-Z, a-z, 0-9, '_', '.', '-' (not . or ..)", namespaceMaxLen)
	}
	return s, nil
}

// parseHostPort splits a heartbeat destination at its last ':' like
// upstream, so unbracketed IPv6 addresses work too, and joins it back in
// the form Go's resolver takes.
func parseHostPort(item string) (string, error) {
	i := strings.LastIndexByte(item, ':')
	if i < 0 {
		return "", errors.New("expected host:port")
	}
	host, port := item[:i], item[i+1:]
	if len(host) >= 2 && host[0] == '[' && host[len(host)-1] == ']' {
		host = host[1 : len(host)-1]
	}
	if host == "" {
		return "", errors.New("empty host")
	}
	if strings.ContainsAny(host, "[]") || strings.ContainsFunc(host, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) {
		return "", errors.New("invalid host")
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 1 || p > 65535 {
		return "", errors.New("port must be between 1 and 65535")
	}
	return net.JoinHostPort(host, strconv.Itoa(p)), nil
}
