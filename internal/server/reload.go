package server

import (
	"context"
	"maps"
	"os"
	"os/signal"
	"path/filepath"
	"reflect"
	"slices"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/sluicehq/sluice/config"
)

// Reload reads the config file again; a valid one replaces the running
// config atomically, an invalid one is logged with every problem and the
// old config keeps serving. Counters survive: state is keyed by policy,
// key, algorithm and period, and a changed rate or burst keeps what each
// key used (docs/config.md).
func (s *Server) Reload() error {
	if s.opts.Config == "" {
		return nil // the embedded default does not change
	}
	cfg, err := load(s.opts)
	if err != nil {
		s.metrics.reloads.WithLabelValues("failure").Inc()
		s.metrics.reloadOK.Set(0)
		s.history.add(false, err.Error())
		s.log.Error("config reload rejected; the previous config keeps serving", "file", s.opts.Config, "problems", err.Error())
		return err
	}
	old := s.state().cfg
	if err := s.buildForwardAuth(cfg); err != nil {
		s.metrics.reloads.WithLabelValues("failure").Inc()
		s.metrics.reloadOK.Set(0)
		s.history.add(false, err.Error())
		s.log.Error("config reload rejected: forward-auth cannot use it; the previous config keeps serving", "file", s.opts.Config, "problems", err.Error())
		return err
	}
	if !reflect.DeepEqual(cfg.Store, old.Store) {
		s.log.Warn("config reload: the store section changed; it takes effect at the next restart")
	}
	if !reflect.DeepEqual(cfg.Listeners, old.Listeners) {
		s.log.Warn("config reload: the listeners section changed; it takes effect at the next restart")
	}
	s.cfg.Store(&state{cfg: cfg})
	s.noteDropped(old, cfg)
	s.syncAdmin(old.Listeners)
	if s.opts.OnReload != nil {
		s.opts.OnReload(cfg)
	}
	s.metrics.reloads.WithLabelValues("success").Inc()
	s.metrics.reloadOK.Set(1)
	s.metrics.lastReload.SetToCurrentTime()
	s.history.add(true, "")
	if cfg.UI.TopKeys == 0 {
		s.activity.forgetKeys()
	}
	s.log.Info("config reloaded", "file", s.opts.Config, "policies", len(cfg.Policies), "domains", len(cfg.Domains))
	return nil
}

// syncAdmin opens the admin listener when a reload set its first token,
// and closes it, with every connection, when a reload removed the token:
// no token, no admin API or status page. lim are the listeners' bounds in
// force.
func (s *Server) syncAdmin(lim config.Listeners) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch token := s.adminToken(); {
	case token == "" && s.adminSrv != nil:
		s.adminSrv.Close()
		s.adminSrv, s.addrs.Admin = nil, ""
		s.log.Warn("config reload: the admin token was removed; the admin API and status page are closed")
	case token != "" && s.adminSrv == nil && s.opts.AdminAddr != "" && s.started:
		if err := s.startAdmin(lim); err != nil {
			s.log.Error("config reload: the admin token is set but the admin listener cannot start", "error", err)
			return
		}
		s.log.Info("config reload: an admin token is set; the admin API and status page are open", "addr", s.addrs.Admin)
	}
}

// CatchSIGHUP makes SIGHUP a reload from now on, never its default
// action, which ends the process. Call it before any listener is bound:
// a SIGHUP sent as soon as the service answers (a config manager's
// reload, a deploy script's) then always finds it caught. WatchReload
// takes the channel; a SIGHUP caught before it is a reload then.
func CatchSIGHUP() chan os.Signal {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	return hup
}

// WatchReload reloads on SIGHUP, received on hup (CatchSIGHUP), and when
// the config file changes (watching its directory, so that an editor's
// rename or a Kubernetes ConfigMap's symlink swap is seen), or, for a
// config directory, any of its YAML files, until ctx ends. It returns once
// the watch is in place, so that a change made after it returns is never
// missed.
func (s *Server) WatchReload(ctx context.Context, hup chan os.Signal) {
	var w *fsnotify.Watcher
	var events <-chan fsnotify.Event
	dir, name := filepath.Dir(s.opts.Config), filepath.Base(s.opts.Config)
	if st, err := os.Stat(s.opts.Config); err == nil && st.IsDir() {
		dir, name = s.opts.Config, ""
	}
	if s.opts.Config != "" {
		var err error
		if w, err = fsnotify.NewWatcher(); err != nil {
			s.log.Warn("cannot watch the config file; reload with SIGHUP", "error", err)
		} else {
			if err := w.Add(dir); err != nil {
				s.log.Warn("cannot watch the config file; reload with SIGHUP", "error", err)
			}
			events = w.Events
		}
	}
	go s.watch(ctx, hup, w, events, name)
}

func (s *Server) watch(ctx context.Context, hup chan os.Signal, w *fsnotify.Watcher, events <-chan fsnotify.Event, name string) {
	defer signal.Stop(hup)
	if w != nil {
		defer w.Close()
	}
	var debounce <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			s.Reload()
		case ev := <-events:
			// The file itself (any YAML file of a directory), or ..data
			// (a ConfigMap's symlink swap).
			b := filepath.Base(ev.Name)
			if b == name || b == "..data" || name == "" && (filepath.Ext(b) == ".yaml" || filepath.Ext(b) == ".yml") {
				debounce = time.After(100 * time.Millisecond)
			}
		case <-debounce:
			s.Reload()
		}
	}
}

// noteDropped warns of what a reload from old to cfg left callers
// naming: a plan removed from a policy that remains (checks that still
// name it are decided by the policy's own limits, and counted in
// sluice_plan_unknown_total), and the runtime overrides of a policy this
// reload removed, which are kept, and apply again if a policy of that name
// returns. Each is said once, by the reload that removed it: a fleet that
// reloads often is not told again at every reload.
func (s *Server) noteDropped(old, cfg *config.Config) {
	for _, was := range old.Policies {
		p := cfg.Policy(was.Name)
		if p == nil {
			continue
		}
		var gone []string
		for plan := range was.Plans {
			if !p.HasPlan(plan) {
				gone = append(gone, plan)
			}
		}
		if len(gone) > 0 {
			slices.Sort(gone)
			s.log.Warn("config reload: plans removed; checks that still name them are decided by the policy's own limits (sluice_plan_unknown_total)",
				"policy", p.Name, "removed", gone, "plans", slices.Sorted(maps.Keys(p.Plans)))
		}
	}
	orphans := map[string]int{}
	for _, e := range s.overrides.List() {
		if cfg.Policy(e.Policy) == nil && old.Policy(e.Policy) != nil {
			orphans[e.Policy]++
		}
	}
	for _, policy := range slices.Sorted(maps.Keys(orphans)) {
		s.log.Warn("config reload: runtime overrides of a policy the config no longer has are kept, and apply to nothing until it returns; remove them with DELETE /admin/overrides",
			"policy", policy, "overrides", orphans[policy])
	}
}
