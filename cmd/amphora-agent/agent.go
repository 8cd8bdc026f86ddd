package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/amphora-agent/amphora-agent/agent"
	"github.com/amphora-agent/amphora-agent/agent/api"
	"github.com/amphora-agent/amphora-agent/agent/config"
	"github.com/amphora-agent/amphora-agent/agent/health"
	"github.com/amphora-agent/amphora-agent/agent/logging"
	"github.com/amphora-agent/amphora-agent/certs"
)

// configFiles collects repeated --config-file flags, like oslo.config.
type configFiles []string

func (c *configFiles) String() string     { return strings.Join(*c, ",") }
func (c *configFiles) Set(v string) error { *c = append(*c, v); return nil }

// Server limits: generous enough for large configs over a slow management
// network, tight enough that a stuck client cannot pin the agent.
const (
	readHeaderTimeout = 10 * time.Second
	readTimeout       = 120 * time.Second
	writeTimeout      = 120 * time.Second
	idleTimeout       = 120 * time.Second
	maxHeaderBytes    = 64 << 10
	shutdownGrace     = 10 * time.Second
)

func runAgent(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("amphora-agent", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var files configFiles
	fs.Var(&files, "config-file", "configuration file (repeatable; later files override earlier ones)")
	showVersion := fs.Bool("version", false, "print the version and exit")
	fs.Usage = func() { usage(stderr); fs.PrintDefaults() }
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *showVersion {
		fmt.Fprintln(stdout, "amphora-agent", version)
		return 0
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "amphora-agent: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	if len(files) == 0 {
		files = configFiles{defaultConfigFile}
	}

	sources, err := config.ReadFiles(files)
	if err != nil {
		fmt.Fprintf(stderr, "amphora-agent: %v\n", err)
		return 1
	}
	cfg, warnings, err := config.Load(sources)
	if err != nil {
		fmt.Fprintf(stderr, "amphora-agent: invalid configuration: %v\n", err)
		return 1
	}

	level := zap.NewAtomicLevelAt(zapcore.InfoLevel)
	log, closeLog := logging.New(level, logging.Options{UseSyslog: cfg.UseSyslog, Facility: cfg.SyslogFacility})
	defer closeLog()
	defer log.Sync()
	for _, w := range warnings {
		log.Warn("configuration", zap.String("problem", w))
	}

	if err := serve(files, cfg, log, level); err != nil {
		log.Error("agent stopped", zap.Error(err))
		return 1
	}
	return 0
}

func serve(files []string, cfg *config.Config, log *zap.Logger, level zap.AtomicLevel) error {
	ctx, stop := context.WithCancel(context.Background())
	defer stop()

	a := agent.New(agent.Options{ConfigFiles: files, Config: cfg, Log: log.Named("agent"), Level: level})
	// The namespace and the plugged ports come back before any load
	// balancer starts; a failure is logged and the API still serves.
	a.PrepareNetwork(ctx)
	a.Start(ctx)
	// Supervision ends with the agent; HAProxy keeps serving and the next
	// agent adopts it.
	defer a.Close()
	// Load balancers come back in the background so the API answers at
	// once; controller mutations wait for the restore's lock.
	go func() {
		if err := a.RestoreLoadBalancers(ctx); err != nil {
			log.Error("restoring load balancers", zap.Error(err))
		}
		// keepalived last: its check tracks the load balancers.
		if err := a.RestoreVRRP(ctx); err != nil {
			log.Error("restoring keepalived", zap.Error(err))
		}
	}()
	// Heartbeats: the first at once, then every heartbeat_interval; key,
	// destinations and interval follow PUT /1.0/config and SIGHUP.
	heartbeat := health.New(health.Options{Config: a.Config(), Log: log.Named("heartbeat")})
	a.OnConfig(heartbeat.SetConfig)
	a.OnLoadBalancerGone(heartbeat.Forget)
	go heartbeat.Run(ctx)

	tlsCfg, err := certs.ServerConfig(cfg.ServerCert, cfg.ServerCA, cfg.TLSMinVersion, log.Named("tls"))
	if err != nil {
		return fmt.Errorf("TLS: %w", err)
	}
	handler := api.NewHandler(a, log.Named("api"), api.Options{
		UploadLimit: func() int64 { return a.Config().MaxUploadBytes },
		Budget:      min(api.DefaultBudget, cfg.RequestReadTimeout),
	})
	srv := &http.Server{
		Handler:           handler,
		TLSConfig:         tlsCfg,
		ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout:       readTimeout,
		WriteTimeout:      writeTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		ErrorLog:          zap.NewStdLog(log.Named("http")),
	}
	// "::" listens on both families, as upstream's default bind_host does.
	ln, err := net.Listen("tcp", cfg.ListenAddress())
	if err != nil {
		return err
	}
	log.Info("amphora agent listening", zap.String("address", ln.Addr().String()),
		zap.String("version", version), zap.String("amphora_id", cfg.AmphoraID),
		zap.Strings("config_files", files))

	errc := make(chan error, 1)
	go func() { errc <- srv.ServeTLS(ln, "", "") }()

	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	defer signal.Stop(sigs)
	for {
		select {
		case err := <-errc:
			return err
		case sig := <-sigs:
			if sig == syscall.SIGHUP {
				if err := a.Reload(); err != nil {
					log.Error("configuration reload failed; keeping the current configuration", zap.Error(err))
				}
				continue
			}
			log.Info("shutting down", zap.String("signal", sig.String()))
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
