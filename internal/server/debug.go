package server

import (
	"net/http"
	"net/http/pprof"

	"github.com/sluicehq/sluice/config"
)

// debugHandler serves what envoyproxy/ratelimit's debug listener does: the
// loaded config (secrets redacted) on /rlconfig, and pprof. Like the
// admin listener it belongs on a private address. /debug/pprof/cmdline is
// left out: the command line may hold secrets.
func (s *Server) debugHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /rlconfig", func(w http.ResponseWriter, _ *http.Request) {
		cfg := s.state().cfg
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if cfg.Source != nil {
			w.Write(config.Redact(cfg.Source))
		}
		for name := range cfg.Domains {
			w.Write([]byte("domain: " + name + "\n"))
		}
	})
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}
