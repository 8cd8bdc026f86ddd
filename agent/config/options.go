package config

// Section names as they appear in the file.
const (
	secDefault    = "DEFAULT"
	secAgent      = "amphora_agent"
	secHAProxy    = "haproxy_amphora"
	secHealth     = "health_manager"
	secController = "controller_worker"
)

// Defaults shared by the option table (options_test.go) and the Config
// they produce.
const (
	defaultSyslogFacility     = "LOG_USER"
	defaultServerCA           = "/etc/octavia/certs/client_ca.pem"
	defaultServerCert         = "/etc/octavia/certs/server.pem"
	defaultNetworkDir         = "/etc/octavia/interfaces"
	defaultRequestReadTimeout = 180
	defaultTLSProtocol        = "TLSv1.2"
	defaultAdminLogFacility   = 1
	defaultUserLogFacility    = 0
	defaultMaxUploadBytes     = 64 << 20
	defaultNamespace          = "amphora-haproxy"
	defaultPluggedInterfaces  = "/var/lib/octavia/plugged_interfaces"
	defaultNftablesRules      = "/var/lib/octavia/nftables-vip.rules"
	defaultHAProxyUserGroup   = "/var/lib/octavia/haproxy-default-user-group.conf"
	defaultPCIRescan          = "/sys/bus/pci/rescan"
	defaultLVSMasquerade      = "/usr/local/bin/lvs-masquerade.sh"
	defaultKeepalivedCmd      = "/usr/sbin/keepalived"
	defaultPrometheusProxy    = "127.0.0.1:9102"
	defaultPrometheusExporter = "127.0.0.1:9101"
	defaultBasePath           = "/var/lib/octavia"
	defaultBaseCertDir        = "/var/lib/octavia/certs"
	defaultBindHost           = "::"
	defaultBindPort           = 9443
	defaultHAProxyCmd         = "/usr/sbin/haproxy"
	defaultRespawnCount       = 2
	defaultRespawnInterval    = 2
	defaultHeartbeatInterval  = 10
	defaultTopology           = TopologySingle
	defaultUDPDriver          = "keepalived_lvs"
	unsetHeartbeatKey         = "None"
	namespaceMaxLen           = 64
)
