package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"golang.org/x/sys/unix"

	"github.com/amphora-agent/amphora-agent/agent"
	"github.com/amphora-agent/amphora-agent/agent/api"
	"github.com/amphora-agent/amphora-agent/agent/config"
	"github.com/amphora-agent/amphora-agent/agent/dirlock"
	"github.com/amphora-agent/amphora-agent/agent/gate"
	"github.com/amphora-agent/amphora-agent/agent/health"
	"github.com/amphora-agent/amphora-agent/agent/journalfwd"
	"github.com/amphora-agent/amphora-agent/agent/logging"
	"github.com/amphora-agent/amphora-agent/agent/memtrim"
	"github.com/amphora-agent/amphora-agent/agent/metrics"
	"github.com/amphora-agent/amphora-agent/agent/sdnotify"
	"github.com/amphora-agent/amphora-agent/certs"
	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/cli"
	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/internal/cmdline"
	"github.com/amphora-agent/amphora-agent/keepalived"
	"github.com/amphora-agent/amphora-agent/keepalived/ipvs"
)

// Server limits: generous enough for large configs over a slow management
// network, tight enough that a stuck client cannot pin the agent.
const (
	readHeaderTimeout = 10 * time.Second
	readTimeout       = 120 * time.Second
	writeTimeout      = 120 * time.Second
	idleTimeout       = 120 * time.Second
	maxHeaderBytes    = 64 << 10
	shutdownGrace     = 10 * time.Second
	handshakeTimeout  = 10 * time.Second
	// Controllers open a handful of connections at a time; the bound
	// only matters to a flood, which then displaces its own oldest.
	maxPendingHandshakes = 128
	// One line about failed handshakes per period at most.
	handshakeLogEvery = 10 * time.Second
)

func runAgent(args []string, stdout, stderr io.Writer) int {
	fs := cmdline.New("amphora-agent", cli.UsageText(), cli.Version, stdout, stderr)
	var files cli.ConfigFiles
	fs.Var(&files, "config-file", "configuration file (repeatable; later files override earlier ones)")
	if code, exit := fs.ParseNoArgs(args); exit {
		return code
	}
	files, cfg, warnings, err := cli.LoadConfig(files)
	if err != nil {
		fmt.Fprintf(stderr, "amphora-agent: %v\n", err)
		return 1
	}
	// One agent per state folder, and before anything else: a second
	// agent on the same configuration must not send a heartbeat, replace
	// the status socket, start HAProxy or restore anything.
	lock, err := dirlock.Acquire(cfg.BasePath, lockFileName)
	if err != nil {
		fmt.Fprintf(stderr, "amphora-agent: %s\n", lockRefusal(err))
		return 1
	}
	defer lock.Release()
	// Signals are caught from here on and wait in the channel until the
	// agent can act on them: the first heartbeat and the API come before
	// the signal loop, and a SIGHUP sent by someone who saw either must
	// reload the configuration, not end the agent (its default action).
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	defer signal.Stop(sigs)

	level := zap.NewAtomicLevelAt(zapcore.InfoLevel)
	log, closeLog := logging.New(level, logging.Options{UseSyslog: cfg.UseSyslog, Facility: cfg.SyslogFacility, StderrJournal: journalfwd.StderrIsJournal()})
	defer closeLog()
	defer log.Sync()
	for _, w := range warnings {
		log.Warn("configuration", zap.String("problem", w))
	}
	log.Info("scheduler", zap.Int("gomaxprocs", setProcs(os.Getenv("GOMAXPROCS"))))

	if err := serve(files, cfg, log, level, sigs); err != nil {
		log.Error("agent stopped", zap.Error(err))
		return 1
	}
	return 0
}

// lockFileName is the lock file in base_path that the running agent holds.
const lockFileName = "amphora-agent.lock"

// lockRefusal is the one line a second agent prints before it exits.
func lockRefusal(err error) string {
	var held *dirlock.HeldError
	if !errors.As(err, &held) {
		return fmt.Sprintf("cannot lock the state folder (base_path): %v", err)
	}
	who := "another agent"
	if held.Pid > 0 {
		who += fmt.Sprintf(" (pid %d)", held.Pid)
	}
	return fmt.Sprintf("%s already runs on the state folder %s (it holds %s); not starting a second one",
		who, held.Dir, held.Path)
}

// setProcs runs the agent's goroutines on one OS thread at a time unless
// the GOMAXPROCS environment variable says otherwise, and returns the
// setting. The agent waits on HAProxy, keepalived, the kernel and the
// controller; with more than one P, every wake-up from idle (each paced
// round of the heartbeat's stats read, each request) also wakes a second
// thread to look for work, which costs more CPU than the work on a VM.
// Octavia's default amphora flavor has one vCPU, so this is the setting
// there anyway; larger flavors leave the other CPUs to HAProxy.
func setProcs(env string) int {
	if env == "" {
		runtime.GOMAXPROCS(1)
	}
	return runtime.GOMAXPROCS(0)
}

// serve runs the agent until a signal or the API's end stops it; HAProxy
// and keepalived keep running after it returns.
func serve(files []string, cfg *config.Config, log *zap.Logger, level zap.AtomicLevel, sigs <-chan os.Signal) error {
	a := agent.New(agent.Options{ConfigFiles: files, Config: cfg, Log: log.Named("agent"), Level: level, Journal: journalSink(log)})
	// Supervision ends with the agent, after the background work; HAProxy
	// and keepalived keep serving and the next agent adopts them.
	defer a.Close()
	// Background work the agent stops and joins before it exits: restore,
	// heartbeats and configuration reloads.
	var bg background
	defer bg.wait(log, shutdownGrace)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	p := &process{ctx: ctx, log: log, cfg: cfg, a: a, bg: &bg, heartbeat: newHeartbeat(a, log)}

	p.startWatchdog()
	// The network is back when Restore returns; the load balancers, the
	// listeners and keepalived come back in the background.
	restored := a.Restore(ctx, agent.RestoreOptions{Progress: p.sd.Status, Go: bg.start, NoDataPlane: noDataPlane()})
	a.Start(ctx)
	p.startBackground()
	srv, serving, ended, err := p.startAPI(files)
	if err != nil {
		return err
	}
	bg.start("readiness", func() error { p.awaitReady(restored, serving); return nil })
	return p.waitForSignals(sigs, srv, ended)
}

// process is the running agent's wiring: what serve starts, and what the
// signal loop and shutdown act on.
type process struct {
	ctx       context.Context
	log       *zap.Logger
	cfg       *config.Config // as loaded at start-up
	a         *agent.Agent
	bg        *background
	sd        *sdnotify.Manager
	live      *sdnotify.Liveness
	heartbeat *health.Sender
	trim      *memtrim.Trimmer
}

// journalSink is where HAProxy's and keepalived's output goes besides
// their files: under systemd, the journal, where operators look
// (package agent/journalfwd).
func journalSink(log *zap.Logger) journalfwd.Sink {
	if !journalfwd.Available() {
		return nil
	}
	log.Info("HAProxy's and keepalived's output is forwarded to the journal")
	return journalfwd.Journal{}
}

// newHeartbeat builds the heartbeat sender, which follows the agent's
// configuration and forgets load balancers that are gone.
func newHeartbeat(a *agent.Agent, log *zap.Logger) *health.Sender {
	hb := health.New(health.Options{Config: a.Config(), Log: log.Named("heartbeat"), HAProxyState: a.LoadBalancerState, LVSBusy: a.LVSBusy})
	a.OnConfig(hb.SetConfig)
	a.OnLoadBalancerGone(hb.Forget)
	return hb
}

// startWatchdog sets up what tells systemd (Type=notify) the restore's
// progress, READY=1 once the API serves the restored state, and watchdog
// pings while the agent's loops are live. Without NOTIFY_SOCKET nothing
// is sent.
func (p *process) startWatchdog() {
	a, log := p.a, p.log
	p.sd = sdnotify.NewManager(sdnotify.Systemd{}, log.Named("systemd"))
	p.live = sdnotify.NewLiveness(time.Now, func() time.Duration { return a.Config().HeartbeatInterval },
		p.heartbeat.LastCycle)
	if timeout := sdnotify.WatchdogTimeout(log); timeout > 0 {
		p.bg.start("watchdog", func() error { p.sd.Watchdog(p.ctx, timeout, p.live.Check); return nil })
	}
}

// startBackground starts the loops that run beside the API: memory trim,
// the status socket, heartbeats and the metrics listener.
func (p *process) startBackground() {
	ctx, log, cfg := p.ctx, p.log, p.cfg
	// Freed heap goes back to the kernel after each burst of requests
	// and the restore, and once a minute when enough built up.
	p.trim = memtrim.New(memtrim.Options{Trimmed: func(n uint64) {
		log.Debug("returned freed memory", zap.Uint64("reclaimable_bytes", n))
	}})
	p.bg.start("memory trim", func() error { p.trim.Run(ctx); return nil })
	// `amphora-agent status` asks on a root-only unix socket, bound here
	// before the API listens so that it is there once the agent answers
	// (and before READY=1); a failure to offer it is logged and changes
	// nothing else.
	if sock, err := cli.ListenStatus(p.a.Config(), log.Named("status")); err != nil {
		log.Warn("status socket not available", zap.Error(err))
	} else {
		p.bg.start("status socket", func() error {
			if err := cli.ServeStatus(ctx, sock, p.a, p.heartbeat, p.a.Config(), log.Named("status")); err != nil {
				log.Warn("status socket failed", zap.Error(err))
			}
			return nil
		})
	}
	// Heartbeats: the first at once, then every heartbeat_interval; key,
	// destinations and interval follow PUT /1.0/config and SIGHUP.
	p.live.HeartbeatStarted(time.Now())
	p.bg.start("heartbeat", func() error { return p.heartbeat.Run(ctx) })
	// PROMETHEUS listeners' metrics, inside the namespace, from start-up.
	m := metrics.NewServer(cfg.Namespace, cfg.PrometheusProxy, cfg.PrometheusExporter, log.Named("metrics"))
	m.Extra = metrics.LVSSeries(keepalived.LVSLayout{Base: cfg.BasePath}, ipvs.Kernel{Namespace: cfg.Namespace}, log.Named("metrics"))
	// A burst of scrapes is handed back like a burst of API requests.
	m.Scraped = p.trim.Touch
	p.bg.start("metrics", func() error { return m.Run(ctx) })
}

// startAPI listens on the API address and serves the controller's
// requests. serving is closed once the server accepts connections; ended
// receives how serving ended.
func (p *process) startAPI(files []string) (srv *http.Server, serving chan struct{}, ended chan error, err error) {
	a, log, cfg := p.a, p.log, p.cfg
	tlsCfg, err := certs.ServerConfig(cfg.ServerCert, cfg.ServerCA, cfg.TLSMinVersion, log.Named("tls"))
	if err != nil {
		return nil, nil, nil, fmt.Errorf("TLS: %w", err)
	}
	serving = make(chan struct{})
	handler := api.NewHandler(a, log.Named("api"), api.Options{
		UploadLimit: func() int64 { return a.Config().MaxUploadBytes },
		Budget:      min(api.DefaultBudget, cfg.RequestReadTimeout),
	})
	srv = &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			handler.ServeHTTP(w, r)
			p.trim.Touch()
		}),
		ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout:       readTimeout,
		WriteTimeout:      writeTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		ErrorLog:          zap.NewStdLog(log.Named("http")),
		// Serve calls this once, right before its accept loop: from then
		// on the API answers.
		BaseContext: func(net.Listener) context.Context { close(serving); return context.Background() },
	}
	// "::" listens on both families, as upstream's default bind_host does.
	ln, err := net.Listen("tcp", cfg.ListenAddress())
	if err != nil {
		return nil, nil, nil, err
	}
	log.Info("amphora agent listening", zap.String("address", ln.Addr().String()),
		zap.String("version", cli.Version), zap.String("amphora_id", cfg.AmphoraID),
		zap.Strings("config_files", files))

	// The gate completes mutual-TLS handshakes before net/http sees a
	// connection: idle or slow connections cannot pile up goroutines and
	// buffers or keep a controller waiting (see package gate).
	front := gate.New(ln, gate.Options{
		TLS:              tlsCfg,
		HandshakeTimeout: handshakeTimeout,
		MaxPending:       maxPendingHandshakes,
		LogEvery:         handshakeLogEvery,
		ErrorBody:        api.UnreadableRequestBody,
		Log:              log.Named("tls"),
	})
	ended = make(chan error, 1)
	go func() {
		err := srv.Serve(front)
		p.live.APIEnded()
		ended <- err
	}()
	return srv, serving, ended, nil
}

// awaitReady sends READY=1 once the restore has ended and the API serves.
// Restore errors go in its STATUS and do not hold it back, since the
// controller needs the API to repair or fail the amphora over.
func (p *process) awaitReady(restored <-chan error, serving <-chan struct{}) {
	var restoreErr error
	select {
	case restoreErr = <-restored:
	case <-p.ctx.Done():
		return
	}
	// The restore was a burst of work like a burst of requests.
	p.trim.Touch()
	select {
	case <-serving:
	case <-p.ctx.Done():
		return
	}
	p.a.SetReady()
	running, stored, countErr := p.a.RunningLoadBalancers()
	p.sd.Ready(sdnotify.ReadyStatus(running, stored, restoreErr, countErr))
}

// waitForSignals reloads the configuration on SIGHUP and shuts the API
// down on SIGTERM or SIGINT; it returns when the API has stopped.
func (p *process) waitForSignals(sigs <-chan os.Signal, srv *http.Server, ended <-chan error) error {
	for {
		select {
		case err := <-ended:
			return err
		case sig := <-sigs:
			if sig == syscall.SIGHUP {
				// Off the signal loop: it waits for the mutation lock.
				p.bg.start("configuration reload", func() error {
					rctx, cancel := context.WithTimeout(p.ctx, reloadWait)
					defer cancel()
					if err := p.a.Reload(rctx); err != nil {
						p.log.Error("configuration reload failed; keeping the current configuration", zap.Error(err))
					}
					return nil
				})
				continue
			}
			p.log.Info("shutting down", zap.String("signal", sig.String()))
			p.sd.Stopping()
			// Requests in flight finish first; then the background work is
			// stopped and joined (deferred in serve). Daemons keep running.
			sctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
			err := srv.Shutdown(sctx)
			cancel()
			if err != nil && !errors.Is(err, context.DeadlineExceeded) {
				return err
			}
			return nil
		}
	}
}

// reloadWait bounds how long a SIGHUP waits for a mutation in progress.
const reloadWait = time.Minute

// background tracks the agent's goroutines so that shutdown can stop and
// join them and log how each ended.
type background struct {
	wg   sync.WaitGroup
	mu   sync.Mutex
	errs []error
}

func (b *background) start(name string, fn func() error) {
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		if err := fn(); err != nil && !errors.Is(err, context.Canceled) {
			b.mu.Lock()
			b.errs = append(b.errs, fmt.Errorf("%s: %w", name, err))
			b.mu.Unlock()
		}
	}()
}

// wait joins the background work, giving up after grace.
func (b *background) wait(log *zap.Logger, grace time.Duration) {
	done := make(chan struct{})
	go func() { b.wg.Wait(); close(done) }()
	select {
	case <-done:
		b.mu.Lock()
		err := errors.Join(b.errs...)
		b.mu.Unlock()
		if err != nil {
			log.Warn("background work ended with errors", zap.Error(err))
		}
		log.Info("agent stopped; HAProxy and keepalived keep running")
	case <-time.After(grace):
		log.Error("background work did not stop in time", zap.Duration("waited", grace))
	}
}

// noDataPlane says why this process cannot build the data-plane namespace
// (it lacks CAP_SYS_ADMIN: not root), "" when it can.
func noDataPlane() string {
	if os.Geteuid() == 0 {
		return ""
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if unix.Capget(&hdr, &data[0]) == nil && data[unix.CAP_SYS_ADMIN/32].Effective&(1<<(unix.CAP_SYS_ADMIN%32)) != 0 {
		return ""
	}
	return "not running as root"
}
