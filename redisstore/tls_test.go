package redisstore_test

import (
	"bytes"
	"context"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/logbuf"
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
// standalone here, on Cluster in TestTLSClientCertificateOnCluster; the
// files given as URL parameters or as Options.TLS.
func TestTLSClientCertificate(t *testing.T) {
	certs := redistest.NewCerts(t)
	standalone := redistest.StandaloneTLS(t, certs)
	tlsClientCertificate(t, []tlsCase{
		{"standalone, URL", tlsURL(certs, true, standalone.Addr), redisstore.TLS{}},
		{"standalone, options", "rediss://" + standalone.Addr, redisstore.TLS{CAFile: certs.CA, CertFile: certs.ClientCert, KeyFile: certs.ClientKey}},
	})
}

// tlsCase is a store's URL and TLS options.
type tlsCase struct {
	name string
	url  string
	opts redisstore.TLS
}

// tlsClientCertificate hammers a store of each case: exactly 1,000 of
// 1,600 admitted on fixed_window 1000/1m, no error.
func tlsClientCertificate(t *testing.T, cases []tlsCase) {
	t.Helper()
	for _, tt := range cases {
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

// tls_skip_hostname_verification, as envoyproxy/ratelimit's
// REDIS_TLS_SKIP_HOSTNAME_VERIFICATION: a server reached by a name its
// certificate does not carry is accepted when its chain verifies, and
// refused when it does not; without it, the name is checked.
func TestTLSSkipHostnameVerification(t *testing.T) {
	certs, other := redistest.NewCerts(t), redistest.NewCerts(t)
	srv := redistest.StandaloneTLS(t, certs)
	client := "&tls_cert_file=" + url.QueryEscape(certs.ClientCert) + "&tls_key_file=" + url.QueryEscape(certs.ClientKey)
	for _, tt := range []struct {
		name  string
		query string
		works bool
	}{
		{"a name the certificate lacks", "tls_ca_file=" + url.QueryEscape(certs.CA) + "&tls_server_name=redis.elsewhere.example", false},
		{"the name not checked", "tls_ca_file=" + url.QueryEscape(certs.CA) + "&tls_server_name=redis.elsewhere.example&tls_skip_hostname_verification=true", true},
		{"the name not checked, another CA", "tls_ca_file=" + url.QueryEscape(other.CA) + "&tls_skip_hostname_verification=true", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			store, err := redisstore.Open("rediss://"+srv.Addr+"?"+tt.query+client, redisstore.Options{Prefix: uniquePrefix(t)})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(store.Close)
			d, err := store.Take(context.Background(), sluice.Request{Key: "k", Limit: sluice.Limit{Rate: 5, Period: time.Hour}, Cost: 1})
			if works := err == nil && d.Allowed; works != tt.works {
				t.Fatalf("%+v, %v; want it to work: %v", d, err, tt.works)
			}
		})
	}
}

// A CA bundle rotated on disk is used without a restart, as cert-manager
// or Vault rotate one: the new CA added to the file, then the server's
// certificate moved to it, then the connections broken. Every new
// connection verifies with the file as it is then; a file left unreadable
// meanwhile keeps the last good bundle in use, and a connection that
// bundle refuses says which file could not be read. With the hostname
// check skipped, the chain is verified against the same rotated bundle.
func TestTLSCARotatedWithoutRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("rotates a CA bundle through three CAs")
	}
	for _, tt := range []struct{ name, query string }{
		{"verified", ""},
		{"hostname not verified", "&tls_server_name=redis.elsewhere.example&tls_skip_hostname_verification=true"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			first, second, third := redistest.NewCerts(t), redistest.NewCerts(t), redistest.NewCerts(t)
			srv := redistest.StandaloneTLS(t, first) // trusts clients of the first CA throughout
			bundle := filepath.Join(t.TempDir(), "ca.crt")
			rotate := func(contents ...[]byte) { t.Helper(); swapFile(t, bundle, bytes.Join(contents, nil)) }
			ca := func(c *redistest.Certs) []byte {
				b, err := os.ReadFile(c.CA)
				if err != nil {
					t.Fatal(err)
				}
				return b
			}
			// serve moves the server to c's certificate and breaks every
			// client's connection, so that the store dials again.
			serve := func(c *redistest.Certs) {
				t.Helper()
				admin := []string{"--tls", "--insecure", "--cert", first.ClientCert, "--key", first.ClientKey}
				redistest.Cli(t, srv.Addr, append(admin, "CONFIG", "SET", "tls-cert-file", c.ServerCert, "tls-key-file", c.ServerKey)...)
				redistest.Cli(t, srv.Addr, append(admin, "CLIENT", "KILL", "TYPE", "normal")...)
			}
			rotate(ca(first))
			q := url.Values{"tls_ca_file": {bundle}, "tls_cert_file": {first.ClientCert}, "tls_key_file": {first.ClientKey}}
			var logged logbuf.Buffer
			store, err := redisstore.Open("rediss://"+srv.Addr+"?"+q.Encode()+tt.query, redisstore.Options{Prefix: uniquePrefix(t), ReconnectInterval: time.Millisecond,
				Logger: slog.New(slog.NewTextHandler(&logged, nil))})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(store.Close)
			until := func(what string, want func(error) bool) error { t.Helper(); return takeUntil(t, store, what, want) }
			until("the first CA", decided)

			rotate(ca(first), ca(second))
			serve(second)
			until("the bundle rotated to hold the second CA, the server moved to it", decided)

			rotate([]byte("-----BEGIN CERTIFICATE-----\nnot yet written"))
			serve(second)
			until("the bundle unreadable, the server where it was", decided)

			serve(third)
			err = until("the server moved to a CA the last good bundle lacks", func(err error) bool {
				return err != nil && strings.Contains(err.Error(), "unknown authority") // a dial's, not the broken connection's
			})
			if !strings.Contains(err.Error(), "no PEM certificate") || !strings.Contains(err.Error(), bundle) {
				t.Fatalf("refused with %v; want the error to name the unreadable bundle %s", err, bundle)
			}
			rotate(ca(third))
			until("the bundle rotated to the third CA", decided)
			// Told once when the bundle could not be read, once when it could again.
			if log := logged.String(); strings.Count(log, "redis TLS ca_file could not be read again") != 1 || strings.Count(log, "redis TLS ca_file read again") != 1 {
				t.Fatalf("want one warning of the unreadable bundle and one line of its end; logged:\n%s", log)
			}
		})
	}
}

// A client certificate and key rotated in their files are used at the
// next connection. While only one of the two has been written, the last
// pair that matched is used, with one warning, and one line once the pair
// matches again: the handshake never presents a certificate without its
// key.
func TestTLSClientCertificateRotated(t *testing.T) {
	certs := redistest.NewCerts(t)
	srv := redistest.StandaloneTLS(t, certs)
	dir := t.TempDir()
	cert, key := filepath.Join(dir, "client.crt"), filepath.Join(dir, "client.key")
	read := func(path string) []byte {
		t.Helper()
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	swapFile(t, cert, read(certs.ClientCert))
	swapFile(t, key, read(certs.ClientKey))
	q := url.Values{"tls_ca_file": {certs.CA}, "tls_cert_file": {cert}, "tls_key_file": {key}}
	var logged logbuf.Buffer
	store, err := redisstore.Open("rediss://"+srv.Addr+"?"+q.Encode(), redisstore.Options{Prefix: uniquePrefix(t), ReconnectInterval: time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(&logged, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Close)
	takeUntil(t, store, "the first pair", decided)

	// The server's certificate is a client's too, signed by the same CA:
	// the second pair. Its certificate is written first.
	swapFile(t, cert, read(certs.ServerCert))
	srv.Do("CLIENT", "KILL", "TYPE", "normal")
	takeUntil(t, store, "the certificate rotated, its key not yet", decided)
	swapFile(t, key, read(certs.ServerKey))
	srv.Do("CLIENT", "KILL", "TYPE", "normal")
	takeUntil(t, store, "the pair rotated", decided)
	if log := logged.String(); strings.Count(log, "redis TLS client certificate could not be read again") != 1 || strings.Count(log, "redis TLS client certificate read again") != 1 {
		t.Fatalf("want one warning of the half-rotated pair and one line of its end; logged:\n%s", log)
	}
}
