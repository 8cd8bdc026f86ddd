package agent

import (
	"context"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/amphora-agent/amphora-agent/agent/config"
	"github.com/amphora-agent/amphora-agent/agent/fault"
	"github.com/amphora-agent/amphora-agent/agent/fsutil"
	"github.com/amphora-agent/amphora-agent/agent/journalfwd"
	"github.com/amphora-agent/amphora-agent/agent/procgroup"
	"github.com/amphora-agent/amphora-agent/agent/procwatch"
	"github.com/amphora-agent/amphora-agent/agent/sysinfo"
	"github.com/amphora-agent/amphora-agent/certs"
	"github.com/amphora-agent/amphora-agent/haproxy"
	"github.com/amphora-agent/amphora-agent/keepalived"
	"github.com/amphora-agent/amphora-agent/netns"
)

// APIVersion is what version discovery answers; the controller only knows
// "1.0" and crashes on anything else.
const APIVersion = "1.0"

// Options are the agent's dependencies. Zero values pick the real system.
type Options struct {
	// ConfigFiles are the --config-file paths, in order; PUT /1.0/config
	// replaces the first, as upstream does.
	ConfigFiles []string
	Config      *config.Config
	Log         *zap.Logger
	// Level is the logger's level, switched live by the `debug` option.
	Level zap.AtomicLevel

	Runner    procgroup.Runner
	Host      sysinfo.Reader
	OSRelease string
	ProcDir   string

	// HAProxyRunner runs `haproxy -c`; nil runs the real binary.
	HAProxyRunner procgroup.Runner
	// LoadBalancers runs HAProxy; nil supervises real processes.
	LoadBalancers lbRunner
	// VRRP runs the ACTIVE_STANDBY keepalived; nil supervises the real one.
	VRRP vrrpRunner
	// LVS runs the UDP and SCTP listeners; nil supervises real keepalived.
	LVS lvsRunner
	// Advertise announces VIPs after a start or reload in SINGLE topology;
	// nil sends real gratuitous ARP / unsolicited NA.
	Advertise func(ctx context.Context, namespace string, addrs []netip.Addr) error
	// Kernel plugs NICs and sets addresses, routes and rules; nil is the
	// real kernel.
	Kernel netns.Kernel
	// Journal receives the output of HAProxy and keepalived (the binary
	// sets it under systemd); nil leaves it in their output files only.
	Journal journalfwd.Sink
}

// Agent is one running amphora agent.
type Agent struct {
	files   []string
	log     *zap.Logger
	level   zap.AtomicLevel
	runner  procgroup.Runner
	host    sysinfo.Reader
	osRel   string
	procDir string
	kernel  netns.Kernel // nil: the real one
	journal journalfwd.Sink

	cfg    atomic.Pointer[config.Config]
	mutate chan struct{} // capacity 1: held while a mutation runs

	versionsOnce sync.Once
	versionsDone chan struct{}
	versionsMu   sync.Mutex // held while versions is read or looked up again
	versions     sysinfo.Versions

	watchMu  sync.Mutex
	watchers []func(*config.Config)
	// lbGone hears of load balancers stopped or deleted, so that nothing
	// reports them from a cache (the heartbeat sender).
	lbGone []func(lb string)

	// Load balancers. Their paths and namespace are fixed at start-up.
	lbStore   *haproxy.Store
	lbs       lbRunner
	advertise func(ctx context.Context, namespace string, addrs []netip.Addr) error
	lbCerts   certs.Store
	reloads   coalescer
	// The ACTIVE_STANDBY keepalived.
	vrrp vrrpRunner
	// The UDP and SCTP listeners' keepalived instances.
	lvs lvsRunner

	// For `amphora-agent status`.
	started  time.Time
	ready    atomic.Bool
	outcomes outcomes
}

// New builds an agent around an already loaded configuration.
func New(o Options) *Agent {
	a := &Agent{
		files:        slices.Clone(o.ConfigFiles),
		log:          o.Log,
		level:        o.Level,
		runner:       o.Runner,
		host:         o.Host,
		osRel:        o.OSRelease,
		procDir:      o.ProcDir,
		kernel:       o.Kernel,
		journal:      o.Journal,
		mutate:       make(chan struct{}, 1),
		versionsDone: make(chan struct{}),
		started:      time.Now().UTC(),
	}
	if a.log == nil {
		a.log = zap.NewNop()
	}
	if a.level == (zap.AtomicLevel{}) {
		a.level = zap.NewAtomicLevel()
	}
	if a.runner == nil {
		a.runner = procgroup.Exec{}
	}
	if a.osRel == "" {
		a.osRel = "/etc/os-release"
	}
	if a.procDir == "" {
		a.procDir = "/proc"
	}
	if a.host.ProcDir == "" {
		a.host.ProcDir = a.procDir
	}
	a.cfg.Store(o.Config)
	a.applyLevel(o.Config)
	a.warnWeakTLS(nil, o.Config)

	cfg := o.Config
	a.lbStore = &haproxy.Store{
		Layout:        haproxy.Layout{Base: cfg.BasePath, ProcDir: a.procDir, Reserved: a.reservedNames},
		HAProxyCmd:    cfg.HAProxyCmd,
		UserGroupFile: cfg.HAProxyUserGroupFile,
		Runner:        o.HAProxyRunner,
		Log:           a.log.Named("haproxy"),
	}
	if o.HAProxyRunner == nil {
		// The uploaded config, lua-load scripts included, is validated
		// without root (package haproxy: Least privilege).
		sb, err := haproxy.NewCheckSandbox(cfg.BaseCertDir, cfg.BasePath)
		if err != nil {
			a.log.Warn("haproxy -c runs as root", zap.Error(err))
		}
		a.lbStore.Sandbox = sb
	}
	a.lbs = o.LoadBalancers
	if a.lbs == nil {
		a.lbs = a.newSupervisor(cfg)
	}
	a.vrrp = o.VRRP
	if a.vrrp == nil {
		a.vrrp = a.newVRRP(cfg)
	}
	a.lvs = o.LVS
	if a.lvs == nil {
		a.lvs = a.newLVS(cfg)
	}
	a.lbCerts = certs.Store{Dir: cfg.BaseCertDir}
	a.advertise = o.Advertise
	if a.advertise == nil {
		log := a.log.Named("advertise")
		a.advertise = func(ctx context.Context, ns string, addrs []netip.Addr) error {
			return netns.AdvertiseWith(ctx, ns, addrs, log)
		}
	}
	return a
}

// lbRunner runs load balancers; haproxy.Supervisor in production, a fake
// in unit tests.
type lbRunner interface {
	Start(ctx context.Context, lb string) error
	Stop(ctx context.Context, lb string) error
	Reload(ctx context.Context, lb string) (started bool, err error)
	Delete(ctx context.Context, lb string) error
	Restore(ctx context.Context) error
	// State never waits for an operation under way (see
	// haproxy.Supervisor.State).
	State(lb string) (running, busy bool)
	Close()
}

func (a *Agent) newSupervisor(cfg *config.Config) *haproxy.Supervisor {
	return haproxy.NewSupervisor(haproxy.SupervisorOptions{
		Store:     a.lbStore,
		Namespace: cfg.Namespace,
		// respawn_count/respawn_interval (upstart's "respawn limit COUNT
		// INTERVAL", still rendered by older controllers) shape the
		// restart backoff instead of being ignored.
		Backoff: procwatch.Backoff{
			Count:    cfg.RespawnCount,
			Interval: cfg.RespawnInterval,
			Max:      procwatch.DefaultBackoff.Max,
			Stable:   procwatch.DefaultBackoff.Stable,
		},
		Log:     a.log.Named("haproxy"),
		ProcDir: a.procDir,
		Journal: a.journal,
	})
}

// Close stops supervision without stopping HAProxy or keepalived: a
// restarted agent adopts them, so traffic never stops with the agent.
func (a *Agent) Close() {
	a.lbs.Close()
	a.vrrp.Close()
	a.lvs.Close()
}

func (a *Agent) certStore() certs.Store { return a.lbCerts }

// Start begins the background work that must not delay start-up: the
// package version lookup that /info and /details report.
func (a *Agent) Start(ctx context.Context) {
	a.versionsOnce.Do(func() {
		go func() {
			cfg := a.Config()
			v := sysinfo.LookupVersions(ctx, a.runner, a.osRel, cfg.HAProxyCmd)
			a.versions = v
			close(a.versionsDone)
			a.log.Info("package versions", zap.String("haproxy", v.HAProxy),
				zap.String("keepalived", v.Keepalived), zap.String("ipvsadm", v.IPVSAdm))
		}()
	})
}

// packageVersions answers the versions looked up at start-up. A version
// that lookup missed (its query timed out on an amphora booting on a busy
// host) is looked up again on each request until found: Octavia cannot
// parse an empty haproxy_version, and skips the amphora's listeners
// (seen in a failover under the cloud tier).
func (a *Agent) packageVersions(ctx context.Context) (sysinfo.Versions, error) {
	a.Start(context.WithoutCancel(ctx))
	select {
	case <-a.versionsDone:
	case <-ctx.Done():
		return sysinfo.Versions{}, ctx.Err()
	}
	a.versionsMu.Lock()
	defer a.versionsMu.Unlock()
	if v := a.versions; v.HAProxy == "" || v.Keepalived == "" || v.IPVSAdm == "" {
		again := sysinfo.LookupVersions(ctx, a.runner, a.osRel, a.Config().HAProxyCmd)
		for _, f := range []struct {
			have  *string
			found string
		}{
			{&a.versions.HAProxy, again.HAProxy}, {&a.versions.Keepalived, again.Keepalived}, {&a.versions.IPVSAdm, again.IPVSAdm},
		} {
			if *f.have == "" && f.found != "" {
				*f.have = f.found
			}
		}
		if a.versions != v {
			a.log.Info("package versions found again", zap.String("haproxy", a.versions.HAProxy),
				zap.String("keepalived", a.versions.Keepalived), zap.String("ipvsadm", a.versions.IPVSAdm))
		}
	}
	return a.versions, nil
}

// Config is the configuration in force.
func (a *Agent) Config() *config.Config { return a.cfg.Load() }

// OnConfig registers fn to be called with every configuration applied after
// start-up (PUT /1.0/config, SIGHUP). The heartbeat sender uses it.
func (a *Agent) OnConfig(fn func(*config.Config)) {
	a.watchMu.Lock()
	a.watchers = append(a.watchers, fn)
	a.watchMu.Unlock()
}

// OnLoadBalancerGone registers fn to be called after a load balancer is
// stopped or deleted.
func (a *Agent) OnLoadBalancerGone(fn func(lb string)) {
	a.watchMu.Lock()
	a.lbGone = append(a.lbGone, fn)
	a.watchMu.Unlock()
}

func (a *Agent) loadBalancerGone(lb string) {
	a.watchMu.Lock()
	fns := slices.Clone(a.lbGone)
	a.watchMu.Unlock()
	for _, fn := range fns {
		fn(lb)
	}
}

// mutationTimeout bounds one mutation once it holds the lock; each
// lifecycle step inside has a tighter deadline of its own. The waits that
// last as long as the client does (a start it asked for, a config check)
// are bounded by the client instead (caller.Of); what follows them gets a
// deadline of its own (renewed).
const mutationTimeout = 55 * time.Second

// exclusive runs fn while holding the mutation lock, so concurrent
// controller flows never interleave changes. Waiting gives up only when ctx
// ends (the client went away, or shutdown); once fn holds the
// lock it runs to completion under its own deadline, whatever happens to
// ctx, so a client that hangs up never leaves a change half done.
//
// The agent is the lock's only owner: every exported method that changes
// state takes it here, so no caller (the API, SIGHUP, start-up) can forget
// it, or hold it across two calls.
func (a *Agent) exclusive(ctx context.Context, fn func(context.Context) error) error {
	select {
	case a.mutate <- struct{}{}:
	default:
		// Busy: wait, unless the caller gives up first. (A free lock is
		// taken even by a caller already gone, so the outcome does not
		// depend on select's coin toss.)
		a.log.Info("request queued behind a change in progress")
		select {
		case a.mutate <- struct{}{}:
		case <-ctx.Done():
			return errAbandoned(ctx)
		}
	}
	defer func() { <-a.mutate }()
	ctx, cancel := renewed(ctx)
	defer cancel()
	return fn(ctx)
}

// renewed is ctx detached from its cancellation with a mutation's own
// deadline; the client that asked (recorded by the API) stays recorded.
func renewed(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), mutationTimeout)
}

// locked is exclusive for a mutation that answers with a value.
func locked[T any](a *Agent, ctx context.Context, fn func(context.Context) (T, error)) (T, error) {
	var v T
	err := a.exclusive(ctx, func(ctx context.Context) (err error) {
		v, err = fn(ctx)
		return err
	})
	return v, err
}

// errAbandoned ends a wait for the lock whose caller gave up: a client
// that went away (nobody reads the answer, but the access log shows it),
// shutdown, or a SIGHUP that waited too long.
func errAbandoned(ctx context.Context) error {
	return fault.Internal("Request abandoned", "stopped waiting for another request to finish", ctx.Err())
}

// Reload re-reads the configuration files (SIGHUP). It takes the
// mutation lock like PUT /1.0/config, so the configuration in force is
// always the one written last, and validates like it: files that
// PUT /1.0/config would refuse (a bad value, even of a heartbeat option, or
// an empty or partial file) leave the configuration in force as it is.
func (a *Agent) Reload(ctx context.Context) error {
	return a.exclusive(ctx, func(context.Context) error {
		sources, err := config.ReadFiles(a.files)
		if err != nil {
			return err
		}
		cfg, warnings, err := config.LoadStrict(sources)
		if err != nil {
			return err
		}
		a.apply(cfg, warnings)
		return nil
	})
}

// UpdateConfig validates an uploaded amphora-agent.conf together with any
// other configured files, then replaces the first config file and applies
// the options upstream applies live. An invalid upload leaves the file and
// the running configuration untouched (upstream writes anything).
func (a *Agent) UpdateConfig(ctx context.Context, body []byte) error {
	return a.exclusive(ctx, func(ctx context.Context) error {
		if len(a.files) == 0 {
			return fault.Internal("Unable to update amphora-agent configuration.", "the agent was started without --config-file", nil)
		}
		sources, err := config.ReadFiles(a.files[1:])
		if err != nil {
			return fault.Internal("Unable to update amphora-agent configuration.", err.Error(), err)
		}
		sources = append([]config.Source{{Name: a.files[0] + " (uploaded)", Data: body}}, sources...)
		cfg, warnings, err := config.LoadStrict(sources)
		if err != nil {
			return fault.Invalid("Invalid amphora-agent configuration", err.Error())
		}
		if err := fsutil.WriteFile(a.files[0], body, 0o600); err != nil {
			return fault.Internal("Unable to update amphora-agent configuration.", err.Error(), err)
		}
		a.apply(cfg, warnings)
		return nil
	})
}

// apply makes cfg the configuration in force. Options that need a new
// listening socket or TLS setup only take effect on restart, as upstream.
func (a *Agent) apply(cfg *config.Config, warnings []string) {
	for _, w := range warnings {
		a.log.Warn("configuration", zap.String("problem", w))
	}
	old := a.cfg.Swap(cfg)
	a.applyLevel(cfg)
	warnedTLS := a.warnWeakTLS(old, cfg)
	if old != nil {
		for _, c := range restartOnly(old, cfg) {
			if c == tlsProtocolOption && warnedTLS {
				continue // its one warning said so
			}
			a.log.Warn("configuration option changed; it takes effect when the agent restarts", zap.String("option", c))
		}
	}
	a.log.Info("configuration applied",
		zap.String("topology", cfg.Topology),
		zap.Strings("controller_ip_port_list", cfg.ControllerIPPortList),
		zap.Duration("heartbeat_interval", cfg.HeartbeatInterval),
		zap.Bool("debug", cfg.Debug))
	a.watchMu.Lock()
	watchers := slices.Clone(a.watchers)
	a.watchMu.Unlock()
	for _, fn := range watchers {
		fn(cfg)
	}
}

// tlsProtocolOption names agent_tls_protocol in log lines.
const tlsProtocolOption = "[amphora_agent] agent_tls_protocol"

// warnWeakTLS logs one warning when cur's agent_tls_protocol asks for a
// version below TLS 1.2, at start-up (old nil) or when a reload changed
// it, and reports whether it did. A reload repeating the value says
// nothing: every configuration push of a controller set up that way
// would otherwise repeat it.
func (a *Agent) warnWeakTLS(old, cur *config.Config) bool {
	if cur == nil || !cur.WeakTLSProtocol() || (old != nil && old.TLSProtocol == cur.TLSProtocol) {
		return false
	}
	fields := []zap.Field{zap.String("option", tlsProtocolOption), zap.String("value", cur.TLSProtocol)}
	if old != nil && old.TLSMinVersion != cur.TLSMinVersion {
		fields = append(fields, zap.Bool("takes_effect_on_restart", true))
	}
	a.log.Warn("configuration: "+tlsProtocolOption+" names a version below TLS 1.2, which is not offered: the API keeps requiring TLS 1.2 or later, so a controller connecting with that version only is refused (set it to TLSv1.2 there)", fields...)
	return true
}

func restartOnly(old, cur *config.Config) []string {
	var changed []string
	check := func(name string, differs bool) {
		if differs {
			changed = append(changed, name)
		}
	}
	check("[haproxy_amphora] bind_host", old.BindHost != cur.BindHost)
	check("[haproxy_amphora] bind_port", old.BindPort != cur.BindPort)
	check("[haproxy_amphora] base_path", old.BasePath != cur.BasePath)
	check("[haproxy_amphora] base_cert_dir", old.BaseCertDir != cur.BaseCertDir)
	check("[amphora_agent] agent_server_cert", old.ServerCert != cur.ServerCert)
	check("[amphora_agent] agent_server_ca", old.ServerCA != cur.ServerCA)
	check(tlsProtocolOption, old.TLSMinVersion != cur.TLSMinVersion)
	check("[amphora_agent] network_namespace", old.Namespace != cur.Namespace)
	check("[amphora_agent] prometheus_proxy_address", old.PrometheusProxy != cur.PrometheusProxy)
	check("[amphora_agent] prometheus_exporter_address", old.PrometheusExporter != cur.PrometheusExporter)
	check("[DEFAULT] use_syslog", old.UseSyslog != cur.UseSyslog)
	check("[DEFAULT] syslog_log_facility", old.SyslogFacility != cur.SyslogFacility)
	return changed
}

func (a *Agent) applyLevel(cfg *config.Config) {
	if cfg == nil {
		return
	}
	if cfg.Debug {
		a.level.SetLevel(zapcore.DebugLevel)
	} else {
		a.level.SetLevel(zapcore.InfoLevel)
	}
}

// RotateCertificate replaces the API's server certificate. An upload that
// would certainly lock the controller out (see certs.ValidateServerPEM) is
// refused and the old file stays; one outside its validity period by this
// amphora's clock alone is taken with a warning, as the clocks may differ.
// The next TLS handshake serves the new certificate.
func (a *Agent) RotateCertificate(ctx context.Context, body []byte) error {
	return a.exclusive(ctx, func(ctx context.Context) error {
		skew, err := certs.ValidateServerPEM(body, a.Config().AmphoraID, time.Now())
		if err != nil {
			return fault.Invalid("Invalid certificate", err.Error())
		}
		switch {
		case skew.Early > 0:
			a.log.Warn("rotated server certificate is not valid yet by this amphora's clock; accepted, the controller's clock may be ahead",
				zap.Duration("valid_in", skew.Early.Round(time.Second)))
		case skew.Late > 0:
			a.log.Warn("rotated server certificate has expired by this amphora's clock; accepted, the controller's clock may be behind",
				zap.Duration("expired_for", skew.Late.Round(time.Second)), zap.Duration("tolerance", certs.ExpiryTolerance))
		}
		path := a.Config().ServerCert
		if err := fsutil.WriteFile(path, body, 0o600); err != nil {
			return fault.Internal("Unable to update the agent certificate.", err.Error(), err)
		}
		a.log.Info("server certificate rotated", zap.String("file", path))
		return nil
	})
}

func (a *Agent) haproxyLayout() haproxy.Layout { return a.lbStore.Layout }

func (a *Agent) lvsLayout() keepalived.LVSLayout {
	return keepalived.LVSLayout{Base: a.lbStore.Layout.Base, ProcDir: a.procDir}
}
