package logging

import (
	"log/syslog"
	"net"
	"path/filepath"
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
