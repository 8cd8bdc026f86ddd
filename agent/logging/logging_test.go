package logging

import (
	"log/syslog"
	"net"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
)

func TestFacility(t *testing.T) {
	for name, want := range map[string]syslog.Priority{
		"LOG_LOCAL1": syslog.LOG_LOCAL1, "local7": syslog.LOG_LOCAL7, "LOG_USER": syslog.LOG_USER, "daemon": syslog.LOG_DAEMON,
	} {
		got, err := Facility(name)
		if err != nil || got != want {
			t.Errorf("Facility(%q) = %v, %v; want %v", name, got, err, want)
		}
	}
	if _, err := Facility("LOG_NOPE"); err == nil {
		t.Error("unknown facility accepted")
	}
}

// TestSyslogCoreWritesFacilityAndSeverity listens on a private unixgram
// socket standing in for /dev/log and checks the priority field.
func TestSyslogCoreWritesFacilityAndSeverity(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "log")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Skipf("cannot create a unixgram socket: %v", err)
	}
	defer conn.Close()
	w, err := syslog.Dial("unixgram", sock, syslog.LOG_LOCAL1|syslog.LOG_INFO, "amphora-agent")
	if err != nil {
		t.Fatal(err)
	}
	level := zap.NewAtomicLevelAt(zap.InfoLevel)
	core := &syslogCore{LevelEnabler: level, enc: newSyslogEncoder(), w: w}
	log := zap.New(core)
	log.Debug("hidden")
	log.Error("boom", zap.String("lb", "L1"))
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 4096)
	n, err := conn.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	got := string(buf[:n])
	// LOCAL1 (17) * 8 + err (3) = 139
	if !strings.HasPrefix(got, "<139>") || !strings.Contains(got, "boom") || !strings.Contains(got, `"lb": "L1"`) {
		t.Fatalf("syslog record = %q", got)
	}
}

// fakeSyslog is a unixgram socket standing in for /dev/log.
func fakeSyslog(t *testing.T) (string, *net.UnixConn) {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "log")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Skipf("cannot create a unixgram socket: %v", err)
	}
	t.Cleanup(func() { conn.Close() })
	return sock, conn
}

// Under systemd, stderr is the journal: each line says its priority
// (sd-daemon prefixes), every line of a multi-line record too, so
// `journalctl -p warning` finds the warnings.
func TestJournalStderrLinesCarryPriority(t *testing.T) {
	var out strings.Builder
	log, done := New(zap.NewAtomicLevelAt(zap.DebugLevel), Options{StderrJournal: true, Stderr: &out})
	log.Debug("d")
	log.Info("i")
	log.Warn("w", zap.String("lb", "L1"))
	log.Error("e\nsecond line")
	done()
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	want := []string{"<7>", "<6>", "<4>", "<3>", "<3>"}
	if len(lines) != len(want) {
		t.Fatalf("stderr:\n%s", out.String())
	}
	for i, l := range lines {
		if !strings.HasPrefix(l, want[i]) {
			t.Errorf("line %d %q: want prefix %s", i, l, want[i])
		}
	}
	if !strings.Contains(lines[2], `"lb": "L1"`) || lines[4] != "<3>second line" {
		t.Errorf("stderr:\n%s", out.String())
	}
}

// With use_syslog under the journal, syslog (/dev/log, which is the
// journal's) carries each record and stderr none: one copy of each line.
func TestJournalWithSyslogWritesEachRecordOnce(t *testing.T) {
	sock, conn := fakeSyslog(t)
	var out strings.Builder
	log, done := New(zap.NewAtomicLevelAt(zap.InfoLevel), Options{StderrJournal: true, Stderr: &out,
		UseSyslog: true, Facility: "LOG_LOCAL1", SyslogNetwork: "unixgram", SyslogAddr: sock})
	log.Warn("once")
	done()
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 4096)
	n, err := conn.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	// LOCAL1 (17) * 8 + warning (4) = 140
	if got := string(buf[:n]); !strings.HasPrefix(got, "<140>") || !strings.Contains(got, "once") {
		t.Fatalf("syslog record = %q", got)
	}
	if out.String() != "" {
		t.Fatalf("stderr has a second copy:\n%s", out.String())
	}
}

// A syslog that cannot be reached leaves stderr as the one output, with
// priorities, and says so.
func TestJournalSyslogUnreachableFallsBackToStderr(t *testing.T) {
	var out strings.Builder
	log, done := New(zap.NewAtomicLevelAt(zap.InfoLevel), Options{StderrJournal: true, Stderr: &out,
		UseSyslog: true, SyslogNetwork: "unixgram", SyslogAddr: filepath.Join(t.TempDir(), "none")})
	log.Info("still here")
	done()
	if s := out.String(); !regexp.MustCompile(`^<4>\S+\tsyslog unavailable`).MatchString(s) || !regexp.MustCompile(`\n<6>\S+\tstill here`).MatchString(s) {
		t.Fatalf("stderr:\n%s", s)
	}
}

// Outside the journal (a terminal, a file), stderr keeps its timestamps
// and levels, and use_syslog adds syslog beside it, as before.
func TestPlainStderrBesideSyslog(t *testing.T) {
	sock, conn := fakeSyslog(t)
	var out strings.Builder
	log, done := New(zap.NewAtomicLevelAt(zap.InfoLevel), Options{Stderr: &out,
		UseSyslog: true, SyslogNetwork: "unixgram", SyslogAddr: sock})
	log.Info("both")
	done()
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 4096)
	if _, err := conn.Read(buf); err != nil {
		t.Fatal(err)
	}
	if s := out.String(); !strings.Contains(s, "INFO") || !strings.Contains(s, "both") || strings.HasPrefix(s, "<") {
		t.Fatalf("stderr:\n%s", s)
	}
}
