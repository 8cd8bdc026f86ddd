package agent

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/amphora-agent/amphora-agent/agent/config/configtest"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// naming counts the warnings that name option, in their message or a field.
func naming(logs *observer.ObservedLogs, option string) int {
	n := 0
	for _, e := range logs.TakeAll() {
		if e.Level != zap.WarnLevel {
			continue
		}
		hit := strings.Contains(e.Message, option)
		for _, v := range e.ContextMap() {
			if s, ok := v.(string); ok && strings.Contains(s, option) {
				hit = true
			}
		}
		if hit {
			n++
		}
	}
	return n
}

// agent_tls_protocol below TLSv1.2 keeps the TLS 1.2 minimum and says so in
// exactly one warning: at start-up, and again only when a reload or a
// configuration push changes the value.
func TestWeakTLSProtocolWarnsOnce(t *testing.T) {
	dir := t.TempDir()
	conf := filepath.Join(dir, "amphora-agent.conf")
	withTLS := func(v string) string {
		return baseConfig(dir) + "[amphora_agent]\nagent_tls_protocol = " + v + "\n"
	}
	if err := os.WriteFile(conf, []byte(withTLS("TLSv1")), 0o600); err != nil {
		t.Fatal(err)
	}
	core, logs := observer.New(zap.InfoLevel)
	a := New(Options{
		ConfigFiles: []string{conf},
		Config:      configtest.Load(t, dir, withTLS("TLSv1")),
		Log:         zap.New(core),
		Runner:      fakeRunner{},
	})
	const option = "agent_tls_protocol"
	if n := naming(logs, option); n != 1 {
		t.Fatalf("start-up with TLSv1: %d warnings naming %s, want 1", n, option)
	}
	ctx := context.Background()
	steps := []struct {
		name  string
		apply func() error
		want  int
	}{
		{"SIGHUP, unchanged", func() error { return a.Reload(ctx) }, 0},
		{"push, unchanged", func() error { return a.UpdateConfig(ctx, []byte(withTLS("TLSv1"))) }, 0},
		{"push TLSv1.1", func() error { return a.UpdateConfig(ctx, []byte(withTLS("TLSv1.1"))) }, 1},
		{"push TLSv1.1 again", func() error { return a.UpdateConfig(ctx, []byte(withTLS("TLSv1.1"))) }, 0},
		{"push TLSv1.2", func() error { return a.UpdateConfig(ctx, []byte(withTLS("TLSv1.2"))) }, 0},
		{"push SSLv3", func() error { return a.UpdateConfig(ctx, []byte(withTLS("SSLv3"))) }, 1},
		// The minimum moves to 1.3 at the next restart: the usual notice.
		{"push TLSv1.3", func() error { return a.UpdateConfig(ctx, []byte(withTLS("TLSv1.3"))) }, 1},
		// Back below 1.2: one warning, which also says it needs a restart.
		{"push TLSv1", func() error { return a.UpdateConfig(ctx, []byte(withTLS("TLSv1"))) }, 1},
		{"SIGHUP after the push", func() error { return a.Reload(ctx) }, 0},
	}
	for _, s := range steps {
		if err := s.apply(); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if n := naming(logs, option); n != s.want {
			t.Errorf("%s: %d warnings naming %s, want %d", s.name, n, option, s.want)
		}
	}
	if v := a.Config().TLSProtocol; v != "TLSv1" {
		t.Fatalf("configuration in force has agent_tls_protocol = %s, want TLSv1", v)
	}
}
