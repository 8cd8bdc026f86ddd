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
	"os"
	"strconv"
	"strings"
	"time"

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
