package logging

import (
	"bytes"
	"io"
	"strconv"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// severities are the syslog severities of zap's levels, as the syslog
// core sends them: crit, err, warning, info, debug.
var severities = []struct {
	min, max zapcore.Level
	severity int
}{
	{zapcore.DPanicLevel, zapcore.FatalLevel, 2},
	{zapcore.ErrorLevel, zapcore.ErrorLevel, 3},
	{zapcore.WarnLevel, zapcore.WarnLevel, 4},
	{zapcore.InfoLevel, zapcore.InfoLevel, 6},
	{zapcore.DebugLevel - 1, zapcore.DebugLevel, 7},
}

// journalStderrCores write console lines to a stderr that is a journal
// stream, each line (a stack trace's too) prefixed with its record's
// syslog severity as sd-daemon(3) describes: journald stores that as the
// entry's PRIORITY, where an unprefixed line would be info. One core per
// severity, each with its own prefix.
func journalStderrCores(enc zapcore.Encoder, out io.Writer, level zapcore.LevelEnabler) []zapcore.Core {
	locked := zapcore.Lock(zapcore.AddSync(out))
	var cores []zapcore.Core
	for _, s := range severities {
		in := zap.LevelEnablerFunc(func(l zapcore.Level) bool { return l >= s.min && l <= s.max && level.Enabled(l) })
		w := &prefixWriter{prefix: []byte("<" + strconv.Itoa(s.severity) + ">"), out: locked}
		cores = append(cores, zapcore.NewCore(enc.Clone(), w, in))
	}
	return cores
}

// prefixWriter puts prefix before every line of each write (zap writes
// one record per call).
type prefixWriter struct {
	prefix []byte
	out    zapcore.WriteSyncer
}

func (w *prefixWriter) Write(p []byte) (int, error) {
	var b bytes.Buffer
	for _, line := range bytes.Split(bytes.TrimSuffix(p, []byte("\n")), []byte("\n")) {
		b.Write(w.prefix)
		b.Write(line)
		b.WriteByte('\n')
	}
	if _, err := w.out.Write(b.Bytes()); err != nil {
		return 0, err
	}
	return len(p), nil
}

func (w *prefixWriter) Sync() error { return w.out.Sync() }
