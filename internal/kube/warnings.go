package kube

import (
	"sync"

	"github.com/go-logr/logr"
	"github.com/sirupsen/logrus"
)

// warningLogger logs the API server's warnings (deprecated APIs and
// fields, ignored fields...) through the run's logger, each once.
type warningLogger struct {
	log  *logrus.Entry
	seen sync.Map
}

// HandleWarningHeader is rest.WarningHandler.
func (w *warningLogger) HandleWarningHeader(code int, _ string, message string) {
	if code != 299 || message == "" {
		return
	}
	if _, dup := w.seen.LoadOrStore(message, true); !dup {
		w.log.Warnf("API server warning: %s", message)
	}
}

// NewKlogLogger is a logr.Logger over log, for klog.SetLogger: what
// client-go logs through klog lands in the run's log (errors as errors,
// klog's V(0) messages as warnings, which is what client-go uses them
// for; verbose ones at debug level) instead of being dropped.
func NewKlogLogger(log *logrus.Entry) logr.Logger {
	return logr.New(&klogSink{log: log})
}

type klogSink struct {
	log  *logrus.Entry
	name string
}

func (s *klogSink) Init(logr.RuntimeInfo) {}

func (s *klogSink) Enabled(level int) bool {
	if level > 0 {
		return s.log.Logger.IsLevelEnabled(logrus.DebugLevel)
	}
	return s.log.Logger.IsLevelEnabled(logrus.WarnLevel)
}

func (s *klogSink) Info(level int, msg string, kv ...any) {
	entry := s.entry(kv)
	if level > 0 {
		entry.Debug(msg)
		return
	}
	entry.Warn(msg)
}

func (s *klogSink) Error(err error, msg string, kv ...any) {
	s.entry(kv).WithError(err).Error(msg)
}

func (s *klogSink) WithValues(kv ...any) logr.LogSink {
	return &klogSink{log: s.entry(kv), name: s.name}
}

func (s *klogSink) WithName(name string) logr.LogSink {
	if s.name != "" {
		name = s.name + "/" + name
	}
	return &klogSink{log: s.log.WithField("logger", name), name: name}
}

func (s *klogSink) entry(kv []any) *logrus.Entry {
	e := s.log.WithField("source", "client-go")
	for i := 0; i+1 < len(kv); i += 2 {
		if k, ok := kv[i].(string); ok {
			e = e.WithField(k, kv[i+1])
		}
	}
	return e
}
