package server

import (
	"context"
	"os"
	"os/signal"
	"path/filepath"
	"reflect"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"
)

// Reload reads the config file again; a valid one replaces the running
// config atomically, an invalid one is logged with every problem and the
// old config keeps serving. Counters survive: state is keyed by policy,
// key, algorithm and period, so a changed rate keeps its counts.
func (s *Server) Reload() error {
	if s.opts.Config == "" {
		return nil // the embedded default does not change
	}
	cfg, err := load(s.opts.Config)
	if err != nil {
		s.metrics.reloads.WithLabelValues("failure").Inc()
		s.log.Error("config reload rejected; the previous config keeps serving", "file", s.opts.Config, "problems", err.Error())
		return err
	}
	old := s.state().cfg
	if !reflect.DeepEqual(cfg.Store, old.Store) {
		s.log.Warn("config reload: the store section changed; it takes effect at the next restart")
	}
	if !reflect.DeepEqual(cfg.Listeners, old.Listeners) {
		s.log.Warn("config reload: the listeners section changed; it takes effect at the next restart")
	}
	s.cfg.Store(&state{cfg: cfg})
	if s.opts.OnReload != nil {
		s.opts.OnReload(cfg)
	}
	s.metrics.reloads.WithLabelValues("success").Inc()
	s.log.Info("config reloaded", "file", s.opts.Config, "policies", len(cfg.Policies), "domains", len(cfg.Domains))
	return nil
}

// WatchReload reloads on SIGHUP and when the config file changes (watching
// its directory, so that an editor's rename or a Kubernetes ConfigMap's
// symlink swap is seen), until ctx ends.
func (s *Server) WatchReload(ctx context.Context) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	var events <-chan fsnotify.Event
	if s.opts.Config != "" {
		if w, err := fsnotify.NewWatcher(); err != nil {
			s.log.Warn("cannot watch the config file; reload with SIGHUP", "error", err)
		} else {
			defer w.Close()
			if err := w.Add(filepath.Dir(s.opts.Config)); err != nil {
				s.log.Warn("cannot watch the config file; reload with SIGHUP", "error", err)
			}
			events = w.Events
		}
	}
	name := filepath.Base(s.opts.Config)
	var debounce <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			s.Reload()
		case ev := <-events:
			// The file itself, or ..data (a ConfigMap's symlink swap).
			if b := filepath.Base(ev.Name); b == name || b == "..data" {
				debounce = time.After(100 * time.Millisecond)
			}
		case <-debounce:
			s.Reload()
		}
	}
}
