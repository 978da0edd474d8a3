// Package proxy is `sluice proxy`: a reverse proxy that applies the policy
// file's policies to the requests it forwards, through httplimit, with the
// same headers and 429s, and shaping (queueing) where a policy asks for it.
package proxy

import (
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/clientip"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/httplimit"
)

// New returns a handler that limits by cfg's policies and forwards what it
// allows to upstream. Streaming responses are flushed as they come and
// websocket upgrades pass through (httputil.ReverseProxy).
func New(cfg *config.Config, guard *sluice.Guard, upstream *url.URL, log *slog.Logger) (http.Handler, error) {
	resolver, err := clientip.RemoteAddr()
	if err != nil {
		return nil, err
	}
	if len(cfg.TrustedProxies) > 0 {
		r, err := clientip.RightmostUntrusted("X-Forwarded-For", cfg.TrustedProxies)
		if err != nil {
			return nil, err
		}
		resolver = r.Or(resolver)
	}
	var policies []httplimit.Policy
	for _, p := range cfg.Policies {
		key, err := keyFunc(p.Key, resolver)
		if err != nil {
			return nil, fmt.Errorf("policy %q: %w", p.Name, err)
		}
		for i, l := range p.Limits {
			name := p.Name
			if len(p.Limits) > 1 {
				name = fmt.Sprintf("%s.%d", p.Name, i)
			}
			policies = append(policies, httplimit.Policy{
				Name: name, Pattern: p.Match, Limit: l, Key: key, Cost: p.Cost,
				FailMode: p.FailMode, Shadow: p.Shadow, Shape: p.Shape,
			})
		}
	}
	m, err := httplimit.New(httplimit.Options{Guard: guard, Policies: policies, Logger: log})
	if err != nil {
		return nil, err
	}
	rp := httputil.NewSingleHostReverseProxy(upstream)
	rp.FlushInterval = -1 // stream responses as they come
	rp.ErrorLog = slog.NewLogLogger(log.Handler(), slog.LevelWarn)
	return m.Handler(rp), nil
}

// keyFunc turns a config key spec into a KeyFunc.
func keyFunc(spec string, resolver *clientip.Resolver) (httplimit.KeyFunc, error) {
	if err := config.ValidateKeySpec(spec); err != nil {
		return nil, err
	}
	var parts []httplimit.KeyFunc
	for _, part := range strings.Split(spec, "+") {
		name, arg, _ := strings.Cut(strings.TrimSpace(part), ":")
		switch name {
		case "client_ip":
			parts = append(parts, httplimit.ClientIP(resolver))
		case "header", "user":
			parts = append(parts, httplimit.APIKey(arg))
		case "user_agent":
			parts = append(parts, httplimit.UserAgent())
		case "route":
			parts = append(parts, httplimit.Route())
		}
	}
	if len(parts) == 1 {
		return parts[0], nil
	}
	return httplimit.Compose(parts...), nil
}
