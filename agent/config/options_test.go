package config

// The table of every option the agent reads, with its default and help:
// the tests check it against what Load reads and against the README's
// table, so that neither can miss an option.

// Option describes one option the agent reads.
type Option struct {
	Section string // as written in the file: "DEFAULT" or a lower-case group
	Key     string
	Default string // "" when the option has no default
	Help    string
	// Ignored options are accepted (controllers render them) but change
	// nothing; at most they produce a warning.
	Ignored bool
}

// Options lists every option the agent reads, in the order Load reads
// them, including the agent's own extensions to upstream's set.
func Options() []Option {
	return []Option{
		{secDefault, "debug", "false", "Debug-level logging.", false},
		{secDefault, "use_syslog", "false", "Log to syslog.", false},
		{secDefault, "syslog_log_facility", defaultSyslogFacility, "Syslog facility of the agent's own log records (LOG_USER, LOG_DAEMON, LOG_LOCAL0..7, ...).", false},

		{secAgent, "amphora_id", "", "This amphora's ID, sent in every heartbeat.", false},
		{secAgent, "agent_server_ca", defaultServerCA, "CA that signed the controller's client certificates.", false},
		{secAgent, "agent_server_cert", defaultServerCert, "PEM file with the API server's certificate and key.", false},
		{secAgent, "agent_server_network_dir", defaultNetworkDir, "Directory of the interface definition files.", false},
		{secAgent, "agent_request_read_timeout", "180", "Seconds a request may run before it is aborted.", false},
		{secAgent, "agent_tls_protocol", defaultTLSProtocol, "Minimum TLS version of the API (SSLv3, TLSv1, TLSv1.1, TLSv1.2, TLSv1.3); anything below TLSv1.2 is raised to TLSv1.2.", false},
		{secAgent, "administrative_log_facility", "1", "LOG_LOCAL<n> facility (0-7) of the amphora's service logs (keepalived).", false},
		{secAgent, "user_log_facility", "0", "LOG_LOCAL<n> facility (0-7) of tenant traffic logs.", false},
		{secAgent, "amphora_udp_driver", defaultUDPDriver, "Deprecated upstream; ignored (a value other than keepalived_lvs gives a warning).", true},
		{secAgent, "max_upload_size", "67108864", "Agent extension: largest accepted request body, in bytes.", false},
		{secAgent, "network_namespace", defaultNamespace, "Agent extension: network namespace of the load balancer's data plane.", false},
		{secAgent, "plugged_interfaces_file", defaultPluggedInterfaces, "Agent extension: file recording the plugged interfaces.", false},
		{secAgent, "nftables_rules_file", defaultNftablesRules, "Agent extension: file holding the VIP nftables rules.", false},
		{secAgent, "haproxy_user_group_file", defaultHAProxyUserGroup, "Agent extension: HAProxy user/group include file.", false},
		{secAgent, "pci_rescan_file", defaultPCIRescan, "Agent extension: sysfs file that triggers a PCI rescan when a port is plugged.", false},
		{secAgent, "lvs_masquerade_script", defaultLVSMasquerade, "Agent extension: up/down script named by interface files for LVS masquerading.", false},
		{secAgent, "keepalived_cmd", defaultKeepalivedCmd, "Agent extension: keepalived binary.", false},
		{secAgent, "prometheus_proxy_address", defaultPrometheusProxy, "Agent extension: where, inside the namespace, the agent serves the Octavia metrics of PROMETHEUS listeners.", false},
		{secAgent, "prometheus_exporter_address", defaultPrometheusExporter, "Agent extension: where, inside the namespace, the agent reads HAProxy's Prometheus exporter.", false},

		{secHAProxy, "base_path", defaultBasePath, "Root directory of the load balancers' state.", false},
		{secHAProxy, "base_cert_dir", defaultBaseCertDir, "Directory of the listeners' certificates.", false},
		{secHAProxy, "bind_host", defaultBindHost, "IP address the API listens on.", false},
		{secHAProxy, "bind_port", "9443", "Port the API listens on.", false},
		{secHAProxy, "haproxy_cmd", defaultHAProxyCmd, "HAProxy binary used in the HAProxy service units.", false},
		{secHAProxy, "respawn_count", "2", "HAProxy restarts allowed per respawn_interval (deprecated upstream; the agent uses it for restart backoff).", false},
		{secHAProxy, "respawn_interval", "2", "Seconds of the HAProxy restart window (deprecated upstream; the agent uses it for restart backoff).", false},
		{secHAProxy, "use_upstart", "true", "Removed upstream; ignored.", true},
		{secHAProxy, "administrative_log_facility", "1", "Written here by controllers but read from [amphora_agent], like upstream; a differing value gives a warning.", true},
		{secHAProxy, "user_log_facility", "0", "Written here by controllers but read from [amphora_agent], like upstream; a differing value gives a warning.", true},

		{secHealth, "controller_ip_port_list", "", "Heartbeat destinations, comma-separated host:port items.", false},
		{secHealth, "heartbeat_interval", "10", "Seconds between heartbeats (at least 1).", false},
		{secHealth, "heartbeat_key", "", "HMAC key of the heartbeats; when unset the key is the string None, like upstream.", false},

		{secController, "loadbalancer_topology", defaultTopology, "SINGLE or ACTIVE_STANDBY.", false},
	}
}
