package etcdembed

import (
	"context"
	"log/slog"
	"sync/atomic"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// slogCore hands etcd's zap records (errors; its warnings are mostly "took
// too long" under load) to slog, so the
// embedded server logs with the rest of the process and tests can silence
// it. Once quiet is set (the server is being closed) it drops everything:
// etcd reports its own listeners closing as errors.
type slogCore struct {
	log    *slog.Logger
	fields []zapcore.Field
	quiet  *atomic.Bool
}

func newZapLogger(log *slog.Logger, quiet *atomic.Bool) *zap.Logger {
	return zap.New(&slogCore{log: log, quiet: quiet})
}

func (c *slogCore) Enabled(l zapcore.Level) bool { return l >= zapcore.ErrorLevel && !c.quiet.Load() }

func (c *slogCore) With(fs []zapcore.Field) zapcore.Core {
	return &slogCore{log: c.log, fields: append(append([]zapcore.Field(nil), c.fields...), fs...), quiet: c.quiet}
}

func (c *slogCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(e.Level) {
		return ce.AddCore(e, c)
	}
	return ce
}

func (c *slogCore) Write(e zapcore.Entry, fs []zapcore.Field) error {
	enc := zapcore.NewMapObjectEncoder()
	for _, f := range append(append([]zapcore.Field(nil), c.fields...), fs...) {
		f.AddTo(enc)
	}
	attrs := make([]any, 0, 2*len(enc.Fields)+2)
	attrs = append(attrs, "component", "etcd")
	for _, k := range sortedFieldKeys(enc.Fields) {
		attrs = append(attrs, k, enc.Fields[k])
	}
	c.log.Log(context.Background(), slog.LevelError, e.Message, attrs...)
	return nil
}

func (c *slogCore) Sync() error { return nil }

func sortedFieldKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	for i := 1; i < len(keys); i++ { // few keys: insertion sort
		for j := i; j > 0 && keys[j] < keys[j-1]; j-- {
			keys[j], keys[j-1] = keys[j-1], keys[j]
		}
	}
	return keys
}
