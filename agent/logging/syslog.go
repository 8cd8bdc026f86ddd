package logging

import (
	"log/syslog"
	"strings"

	"go.uber.org/zap/zapcore"
)

// syslogCore sends each record to syslog with the matching severity.
type syslogCore struct {
	zapcore.LevelEnabler
	enc zapcore.Encoder
	w   *syslog.Writer
}

func (c *syslogCore) With(fields []zapcore.Field) zapcore.Core {
	clone := *c
	clone.enc = c.enc.Clone()
	for _, f := range fields {
		f.AddTo(clone.enc)
	}
	return &clone
}

func (c *syslogCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(e.Level) {
		return ce.AddCore(e, c)
	}
	return ce
}

func (c *syslogCore) Write(e zapcore.Entry, fields []zapcore.Field) error {
	buf, err := c.enc.EncodeEntry(e, fields)
	if err != nil {
		return err
	}
	msg := strings.TrimSuffix(buf.String(), "\n")
	buf.Free()
	switch {
	case e.Level >= zapcore.DPanicLevel:
		return c.w.Crit(msg)
	case e.Level >= zapcore.ErrorLevel:
		return c.w.Err(msg)
	case e.Level >= zapcore.WarnLevel:
		return c.w.Warning(msg)
	case e.Level >= zapcore.InfoLevel:
		return c.w.Info(msg)
	default:
		return c.w.Debug(msg)
	}
}

func (c *syslogCore) Sync() error { return nil }
