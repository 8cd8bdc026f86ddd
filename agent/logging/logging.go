// Package logging builds the agent's zap logger: human-readable lines on
// stderr (journald captures them) and, when use_syslog is set, the same
// records to the local syslog daemon with the configured facility. When
// stderr is the journal, every line carries its priority, and with
// use_syslog each record goes to syslog only: the journal is what listens
// on /dev/log under systemd, so writing both stored every line twice.
package logging

import (
	"fmt"
	"io"
	"log/syslog"
	"os"
	"strings"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// Options select the outputs.
type Options struct {
	UseSyslog bool
	// Facility is an oslo name such as LOG_LOCAL1 or LOG_USER.
	Facility string
	// Tag names the program in syslog.
	Tag string
	// StderrJournal says stderr is a journal stream (JOURNAL_STREAM names
	// it): lines get sd-daemon priority prefixes ("<4>" for a warning).
	StderrJournal bool
	// Stderr is where lines go; nil is os.Stderr.
	Stderr io.Writer
	// SyslogNetwork and SyslogAddr name the syslog socket; empty is the
	// local default (/dev/log).
	SyslogNetwork, SyslogAddr string
}

var facilities = map[string]syslog.Priority{
	"KERN": syslog.LOG_KERN, "USER": syslog.LOG_USER, "MAIL": syslog.LOG_MAIL,
	"DAEMON": syslog.LOG_DAEMON, "AUTH": syslog.LOG_AUTH, "SYSLOG": syslog.LOG_SYSLOG,
	"LPR": syslog.LOG_LPR, "NEWS": syslog.LOG_NEWS, "UUCP": syslog.LOG_UUCP,
	"CRON": syslog.LOG_CRON, "AUTHPRIV": syslog.LOG_AUTHPRIV, "FTP": syslog.LOG_FTP,
	"LOCAL0": syslog.LOG_LOCAL0, "LOCAL1": syslog.LOG_LOCAL1, "LOCAL2": syslog.LOG_LOCAL2,
	"LOCAL3": syslog.LOG_LOCAL3, "LOCAL4": syslog.LOG_LOCAL4, "LOCAL5": syslog.LOG_LOCAL5,
	"LOCAL6": syslog.LOG_LOCAL6, "LOCAL7": syslog.LOG_LOCAL7,
}

// Facility maps an oslo facility name to a syslog priority.
func Facility(name string) (syslog.Priority, error) {
	key := strings.TrimPrefix(strings.ToUpper(strings.TrimSpace(name)), "LOG_")
	p, ok := facilities[key]
	if !ok {
		return 0, fmt.Errorf("unknown syslog facility %q", name)
	}
	return p, nil
}

func encoderConfig() zapcore.EncoderConfig {
	ec := zap.NewProductionEncoderConfig()
	ec.EncodeTime = zapcore.ISO8601TimeEncoder
	ec.EncodeLevel = zapcore.CapitalLevelEncoder
	ec.EncodeDuration = zapcore.StringDurationEncoder
	return ec
}

// newSyslogEncoder leaves out time and level: syslog stamps its own time
// and carries the severity in the priority.
func newSyslogEncoder() zapcore.Encoder {
	ec := encoderConfig()
	ec.TimeKey, ec.LevelKey = "", ""
	return zapcore.NewConsoleEncoder(ec)
}

// New returns the logger and a cleanup function. A syslog daemon that is
// not reachable is reported on stderr and otherwise ignored: logging must
// never stop the agent from serving.
func New(level zap.AtomicLevel, o Options) (*zap.Logger, func()) {
	stderr := o.Stderr
	if stderr == nil {
		stderr = os.Stderr
	}
	var cores []zapcore.Core
	cleanup := func() {}
	var syslogErr error
	if o.UseSyslog {
		w, err := dialSyslog(o)
		if err != nil {
			syslogErr = err
		} else {
			cores = append(cores, &syslogCore{LevelEnabler: level, enc: newSyslogEncoder(), w: w})
			cleanup = func() { w.Close() }
		}
	}
	// Under the journal, syslog is the journal: stderr would be a second
	// copy of each record.
	if len(cores) == 0 || !o.StderrJournal {
		ec := encoderConfig()
		if o.StderrJournal {
			// The journal stamps its own time and the prefix is the level.
			ec.TimeKey, ec.LevelKey = "", ""
			cores = append(cores, journalStderrCores(zapcore.NewConsoleEncoder(ec), stderr, level)...)
		} else {
			cores = append(cores, zapcore.NewCore(zapcore.NewConsoleEncoder(ec), zapcore.Lock(zapcore.AddSync(stderr)), level))
		}
	}
	log := zap.New(zapcore.NewTee(cores...), zap.AddCaller())
	if syslogErr != nil {
		log.Warn("syslog unavailable; logging to stderr only", zap.Error(syslogErr))
	}
	return log, cleanup
}

func dialSyslog(o Options) (*syslog.Writer, error) {
	fac := syslog.LOG_USER
	if o.Facility != "" {
		f, err := Facility(o.Facility)
		if err != nil {
			return nil, err
		}
		fac = f
	}
	tag := o.Tag
	if tag == "" {
		tag = "amphora-agent"
	}
	if o.SyslogAddr != "" {
		return syslog.Dial(o.SyslogNetwork, o.SyslogAddr, fac|syslog.LOG_INFO, tag)
	}
	return syslog.New(fac|syslog.LOG_INFO, tag)
}
