package bgp

import (
	"context"
	"log/slog"

	gobgplog "github.com/osrg/gobgp/v3/pkg/log"
)

// logger passes GoBGP's structured logs to slog (GoBGP logs session
// changes at Info and much detail at Debug).
type logger struct{ l *slog.Logger }

func (g *logger) emit(level slog.Level, msg string, f gobgplog.Fields) {
	if !g.l.Enabled(context.Background(), level) {
		return
	}
	args := make([]any, 0, 2*len(f))
	for k, v := range f {
		args = append(args, k, v)
	}
	g.l.Log(context.Background(), level, "gobgp: "+msg, args...)
}

// Panic and Fatal only log: the embedded server must not end the edge.
func (g *logger) Panic(msg string, f gobgplog.Fields) { g.emit(slog.LevelError, msg, f) }
func (g *logger) Fatal(msg string, f gobgplog.Fields) { g.emit(slog.LevelError, msg, f) }
func (g *logger) Error(msg string, f gobgplog.Fields) { g.emit(slog.LevelError, msg, f) }
func (g *logger) Warn(msg string, f gobgplog.Fields)  { g.emit(slog.LevelWarn, msg, f) }
func (g *logger) Info(msg string, f gobgplog.Fields)  { g.emit(slog.LevelInfo, msg, f) }
func (g *logger) Debug(msg string, f gobgplog.Fields) { g.emit(slog.LevelDebug, msg, f) }
func (g *logger) SetLevel(gobgplog.LogLevel)          {}

// GetLevel lets GoBGP skip building debug messages nobody reads.
func (g *logger) GetLevel() gobgplog.LogLevel {
	if g.l.Enabled(context.Background(), slog.LevelDebug) {
		return gobgplog.DebugLevel
	}
	return gobgplog.InfoLevel
}
