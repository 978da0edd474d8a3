package redisstore_test

import (
	"context"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisstore"
)

// tlsURL is a rediss:// URL of addrs with certs' files as its tls_*
// parameters: the CA, and the client certificate when client is set.
func tlsURL(certs *redistest.Certs, client bool, addrs ...string) string {
	q := url.Values{"tls_ca_file": {certs.CA}}
	if client {
		q.Set("tls_cert_file", certs.ClientCert)
		q.Set("tls_key_file", certs.ClientKey)
	}
	return "rediss://" + strings.Join(addrs, ",") + "?" + q.Encode()
}

// With tls-auth-clients yes (Redis's default once TLS is on), a store
// that presents a client certificate decides every check in Redis: 64
// callers on fixed_window 1000/1m, exactly 1,000 admitted, no error. On
// standalone and on Cluster, the files given as URL parameters or as
// Options.TLS.
func TestTLSClientCertificate(t *testing.T) {
	certs := redistest.NewCerts(t)
	standalone := redistest.StandaloneTLS(t, certs)
	cluster := addrsOf(redistest.ClusterTLS(t, certs))
	for _, tt := range []struct {
		name string
		url  string
		opts redisstore.TLS
	}{
		{"standalone, URL", tlsURL(certs, true, standalone.Addr), redisstore.TLS{}},
		{"standalone, options", "rediss://" + standalone.Addr, redisstore.TLS{CAFile: certs.CA, CertFile: certs.ClientCert, KeyFile: certs.ClientKey}},
		{"cluster, URL", tlsURL(certs, true, cluster...), redisstore.TLS{}},
		{"cluster, options, redis:// turned to TLS", "redis://" + strings.Join(cluster, ","), redisstore.TLS{CAFile: certs.CA, CertFile: certs.ClientCert, KeyFile: certs.ClientKey, ServerName: "localhost"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			store, err := redisstore.Open(tt.url, redisstore.Options{Prefix: uniquePrefix(t), TLS: tt.opts})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(store.Close)
			allowed, failed := hammer(store, sluice.Limit{Rate: 1000, Period: time.Minute, Algorithm: sluice.FixedWindow}, 64, 25)
			if allowed != 1000 || failed != 0 {
				t.Fatalf("admitted %d of 1600 on fixed_window 1000/1m with %d errors; want exactly 1000, none", allowed, failed)
			}
		})
	}
}

// hammer sends callers × each checks of limit on one key, at once, and
// returns how many were allowed and how many failed. Every check carries
// the same Now, inside one window: the count never straddles two.
func hammer(store sluice.Store, limit sluice.Limit, callers, each int) (allowed, failed int64) {
	now := time.Now().Truncate(limit.Period).Add(time.Second)
	var a, f atomic.Int64
	var wg sync.WaitGroup
	for range callers {
		wg.Go(func() {
			for range each {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				d, err := store.Take(ctx, sluice.Request{Key: "hot", Limit: limit, Cost: 1, Now: now})
				cancel()
				switch {
				case err != nil:
					f.Add(1)
				case d.Allowed:
					a.Add(1)
				}
			}
		})
	}
	wg.Wait()
	return a.Load(), f.Load()
}

// Without a client certificate, or with a CA that did not sign the
// server's, every call fails with an error that says which.
func TestTLSRefusedSaysWhy(t *testing.T) {
	certs := redistest.NewCerts(t)
	srv := redistest.StandaloneTLS(t, certs)
	other := redistest.NewCerts(t)
	for _, tt := range []struct {
		url, want string
	}{
		{tlsURL(certs, false, srv.Addr), "tls_cert_file"},
		{tlsURL(other, true, srv.Addr), "certificate signed by unknown authority"},
	} {
		store, err := redisstore.Open(tt.url, redisstore.Options{Prefix: uniquePrefix(t), ReconnectInterval: time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		_, err = store.Take(context.Background(), sluice.Request{Key: "k", Limit: sluice.PerSecond(1), Cost: 1})
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: error %v; want one saying %q", tt.url, err, tt.want)
		}
		store.Close()
	}
}

// Open refuses TLS settings it cannot use, saying which.
func TestTLSSettingsRefused(t *testing.T) {
	certs := redistest.NewCerts(t)
	for _, tt := range []struct {
		url  string
		opts redisstore.TLS
		want string
	}{
		{"rediss://127.0.0.1:1?tls_ca_file=/nonexistent", redisstore.TLS{}, "ca_file"},
		{"rediss://127.0.0.1:1?tls_ca_file=" + url.QueryEscape(certs.ClientKey), redisstore.TLS{}, "no PEM certificate"},
		{"rediss://127.0.0.1:1", redisstore.TLS{CertFile: certs.ClientCert}, "cert_file and key_file go together"},
		{"rediss://127.0.0.1:1?tls_cert_file=" + url.QueryEscape(certs.ClientCert) + "&tls_key_file=" + url.QueryEscape(certs.ServerKey), redisstore.TLS{}, "client certificate"},
		{"rediss://127.0.0.1:1?tls_insecure_skip_verify=maybe", redisstore.TLS{}, "tls_insecure_skip_verify"},
	} {
		if _, err := redisstore.Open(tt.url, redisstore.Options{TLS: tt.opts}); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s %+v: error %v; want one saying %q", tt.url, tt.opts, err, tt.want)
		}
	}
}
