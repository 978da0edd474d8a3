package server

import (
	"crypto/tls"
	"fmt"
	"net"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/internal/rotated"
	"github.com/sluicehq/sluice/internal/tlsfiles"
)

// Every listener of the daemon may serve TLS, and mutual TLS with a
// client CA: its files come from Options.TLS (the -tls-* flags, for every
// listener) or else from the config's listeners.tls.<listener>, and are
// read again at each handshake (tlsfiles). A listener without files is
// plain TCP. What each listener trusts is in docs/operations.md.

// listenerFiles returns the TLS files of listener name: http (and the
// proxy's metrics listener), grpc, admin or proxy; none for the others.
func (s *Server) listenerFiles(name string) tlsfiles.Files {
	var t config.ListenerTLS
	if s.opts.TLS != nil {
		t = *s.opts.TLS
	} else {
		all := s.state().cfg.Listeners.TLS
		t = map[string]config.ListenerTLS{"http": all.HTTP, "metrics": all.HTTP, "grpc": all.GRPC, "admin": all.Admin, "proxy": all.Proxy}[name]
	}
	return tlsfiles.Files{CertFile: t.CertFile, KeyFile: t.KeyFile, CAFile: t.ClientCAFile}
}

// listenerTLS returns the TLS config of listener name speaking protos
// (ALPN), or nil for plain TCP; its handshakes refused are counted.
func (s *Server) listenerTLS(name string, files tlsfiles.Files, protos ...string) (*tls.Config, error) {
	c, counted, err := tlsfiles.Server(files, name+" listener", s.log, s.listenRefused(name))
	if err != nil || c == nil {
		return nil, err
	}
	c.NextProtos = protos
	s.tlsFiles.add(counted)
	return c, nil
}

// listenRefused returns the function that counts what listener name
// refused, by reason.
func (s *Server) listenRefused(name string) func(reason string) {
	c := s.listenerRefused
	return func(reason string) { c.WithLabelValues(name, reason).Inc() }
}

// listen listens on addr for listener name, with its TLS. Without wrap
// (HTTP) the TLS listener is outermost, so that http.Server sees its
// *tls.Conn (for HTTP/2 and Request.TLS); with wrap (gRPC's rapid-reset
// guard, which reads the frames) it is beneath wrap.
func (s *Server) listen(name, addr string, lim config.Listeners, wrap func(net.Listener) net.Listener, protos ...string) (net.Listener, error) {
	c, err := s.listenerTLS(name, s.listenerFiles(name), protos...)
	if err != nil {
		return nil, fmt.Errorf("%s listener: %w", name, err)
	}
	switch {
	case wrap == nil:
		ln, err := listen(addr, lim, func(ln net.Listener) net.Listener { return ln })
		if err != nil || c == nil {
			return ln, err
		}
		return tls.NewListener(ln, c), nil
	case c != nil:
		inner := wrap
		wrap = func(ln net.Listener) net.Listener { return inner(tls.NewListener(ln, c)) }
	}
	return listen(addr, lim, wrap)
}

// httpProtos are the ALPN protocols of an HTTP listener over TLS:
// http.Server serves HTTP/2 on a TLS listener of its own.
var httpProtos = []string{"h2", "http/1.1"}

// ListenProxy listens on addr for `sluice proxy`'s traffic, bounded by the
// config's listeners and with its listeners.tls.proxy (or Options.TLS).
func (s *Server) ListenProxy(addr string) (net.Listener, error) {
	return s.listen("proxy", addr, s.state().cfg.Listeners, nil, httpProtos...)
}

// tlsFiles are the TLS files every listener and the peers read again,
// for the count of their failed reads.
type tlsFiles struct {
	mu    sync.Mutex
	files []rotated.Counted
}

func (f *tlsFiles) add(files []rotated.Counted) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.files = append(f.files, files...)
}

func (f *tlsFiles) failures() float64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	var n uint64
	for _, c := range f.files {
		n += c.Failures()
	}
	return float64(n)
}

// registerTLSMetrics registers what the listeners' and peers' TLS and
// secrets count.
func (s *Server) registerTLSMetrics() {
	s.listenerRefused = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_listener_refused_total",
		Help: "Connections and calls a listener refused for their credentials, by listener (http, grpc, admin, metrics, proxy, peer) and reason: handshake (not TLS, or TLS it does not speak; peer only), no_certificate, bad_certificate (not signed by the client CA, expired, not for client auth), no_secret, bad_secret (peer calls without the members' secret).",
	}, []string{"listener", "reason"})
	s.metrics.reg.MustRegister(s.listenerRefused, prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "sluice_tls_file_errors_total",
		Help: "Reads of the listeners' and peers' TLS certificates, keys and CA bundles, and of the peer secret file, that failed, each at a handshake or call: the last good one stays in use; the first of a run is logged.",
	}, s.tlsFiles.failures))
}

// Scheme returns "https" when listener name (http, metrics, admin, proxy)
// serves TLS, and "http" when it does not.
func (s *Server) Scheme(name string) string {
	if s.listenerFiles(name).CertFile != "" {
		return "https"
	}
	return "http"
}
