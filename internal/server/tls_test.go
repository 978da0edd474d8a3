package server

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	shardv1 "github.com/sluicehq/sluice/api/shardv1"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/internal/logbuf"
	"github.com/sluicehq/sluice/internal/redistest"
)

// startWith runs a Server with the config text and opts' addresses on
// free ports, the admin listener with a token, until the test ends.
func startWith(t *testing.T, config string, opts Options) *Server {
	t.Helper()
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	if err := os.WriteFile(path, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	opts.Config, opts.HTTPAddr, opts.GRPCAddr, opts.AdminAddr, opts.AdminToken = path, "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0", "admin-token-of-the-test"
	opts.Logger = slog.New(slog.NewTextHandler(&logbuf.Buffer{}, nil))
	s, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s.Shutdown(ctx)
	})
	return s
}

// clientTLS is a client's TLS: trusting ca, presenting certFile's pair if
// set.
func clientTLS(t *testing.T, ca, certFile, keyFile string) *tls.Config {
	t.Helper()
	pool := x509.NewCertPool()
	data, err := os.ReadFile(ca)
	if err != nil || !pool.AppendCertsFromPEM(data) {
		t.Fatalf("ca %s: %v", ca, err)
	}
	c := &tls.Config{RootCAs: pool, ServerName: "localhost"}
	if certFile != "" {
		pair, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			t.Fatal(err)
		}
		c.Certificates = []tls.Certificate{pair}
	}
	return c
}

// get GETs url over a connection of its own with c, and returns the
// status and HTTP major version, or the error.
func get(url string, c *tls.Config) (int, int, error) {
	code, proto, _, err := fetchTLS(url, c)
	return code, proto, err
}

// fetchTLS is get, with the body.
func fetchTLS(url string, c *tls.Config) (int, int, []byte, error) {
	if c != nil {
		c = c.Clone() // the transport sets its protocols on it
	}
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: c, ForceAttemptHTTP2: true, DisableKeepAlives: true}}
	resp, err := hc.Get(url)
	if err != nil {
		return 0, 0, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.ProtoMajor, body, err
}

// With listeners.tls and a client CA, every listener serves only clients
// with a certificate that CA signed: one without a certificate, with
// another CA's, or in plain text is refused (and counted), one with a good
// certificate is served, HTTP/2 included.
func TestListenersMutualTLS(t *testing.T) {
	certs, stranger := redistest.NewCerts(t), redistest.NewCerts(t)
	files := fmt.Sprintf("{cert_file: %s, key_file: %s, client_ca_file: %s}", certs.ServerCert, certs.ServerKey, certs.CA)
	s := startWith(t, fmt.Sprintf("listeners: {drain: 0s, tls: {http: %s, grpc: %s, admin: %s, proxy: %s}}\npolicies: [{name: a, limit: 5/m}]\n", files, files, files, files), Options{})
	a := s.Addrs()
	proxy, err := s.ListenProxy("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := HTTPServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}), s.Config().Listeners, true, slog.Default())
	go hs.Serve(proxy)
	t.Cleanup(func() { hs.Close() })
	good := clientTLS(t, certs.CA, certs.ClientCert, certs.ClientKey)
	refused := []struct {
		name string
		tls  *tls.Config
	}{
		{"no certificate", clientTLS(t, certs.CA, "", "")},
		{"another CA's certificate", clientTLS(t, certs.CA, stranger.ClientCert, stranger.ClientKey)},
	}
	for _, l := range []struct{ name, url string }{{"http", "https://" + a.HTTP + "/healthz"}, {"admin", "https://" + a.Admin + "/ui/login"}, {"proxy", "https://" + proxy.Addr().String() + "/"}} {
		code, proto, err := get(l.url, good)
		if err != nil || code != http.StatusOK || proto != 2 {
			t.Errorf("%s: a client with a good certificate: %d over HTTP/%d, %v; want 200 over HTTP/2", l.name, code, proto, err)
		}
		for _, r := range refused {
			if code, _, err := get(l.url, r.tls); err == nil {
				t.Errorf("%s: a client with %s was answered %d; want the handshake refused", l.name, r.name, code)
			}
		}
		if code, _, err := get(strings.Replace(l.url, "https:", "http:", 1), nil); err == nil && code == http.StatusOK {
			t.Errorf("%s: a plain-text client was served", l.name)
		}
	}
	health := func(c credentials.TransportCredentials) error {
		conn, err := grpc.NewClient(a.GRPC, grpc.WithTransportCredentials(c))
		if err != nil {
			return err
		}
		defer conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err = healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
		return err
	}
	if err := health(credentials.NewTLS(good)); err != nil {
		t.Errorf("grpc: a client with a good certificate: %v", err)
	}
	for _, r := range refused {
		if err := health(credentials.NewTLS(r.tls)); err == nil {
			t.Errorf("grpc: a client with %s was answered", r.name)
		}
	}
	if err := health(insecure.NewCredentials()); err == nil {
		t.Error("grpc: a plain-text client was answered")
	}
	_, _, body, err := fetchTLS("https://"+a.HTTP+"/metrics", good)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range []string{"http", "admin", "grpc", "proxy"} {
		for _, reason := range []string{"no_certificate", "bad_certificate"} {
			if !bytes.Contains(body, []byte(fmt.Sprintf(`sluice_listener_refused_total{listener=%q,reason=%q} `, l, reason))) {
				t.Errorf("no sluice_listener_refused_total for %s, %s", l, reason)
			}
		}
	}
}

// A listener's certificate rotated on disk is the one served from the
// next handshake; a pair half rotated (the key written, the certificate
// not yet) leaves the last good pair served. The -tls-* flags
// (Options.TLS) give it to every listener, the proxy's too.
func TestListenerCertificateRotation(t *testing.T) {
	certs, next := redistest.NewCerts(t), redistest.NewCerts(t)
	dir := t.TempDir()
	cert, key := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	copyTo(t, certs.ServerCert, cert)
	copyTo(t, certs.ServerKey, key)
	s := startWith(t, "listeners: {drain: 0s}\npolicies: [{name: a, limit: 5/m}]\n", Options{TLS: &config.ListenerTLS{CertFile: cert, KeyFile: key}})
	proxy, err := s.ListenProxy("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := HTTPServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}), s.Config().Listeners, true, slog.Default())
	go hs.Serve(proxy)
	t.Cleanup(func() { hs.Close() })
	for _, addr := range []string{s.Addrs().HTTP, s.Addrs().Admin, proxy.Addr().String()} {
		served := func() string {
			t.Helper()
			conn, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}})
			if err != nil {
				t.Fatalf("%s: %v", addr, err)
			}
			defer conn.Close()
			leaf := conn.ConnectionState().PeerCertificates[0].Raw
			for _, c := range []*redistest.Certs{certs, next} {
				if block, _ := pem.Decode(readAll(t, c.ServerCert)); bytes.Equal(block.Bytes, leaf) {
					return c.ServerCert
				}
			}
			return "another certificate"
		}
		copyTo(t, certs.ServerCert, cert)
		copyTo(t, certs.ServerKey, key)
		if got := served(); got != certs.ServerCert {
			t.Fatalf("%s serves %s; want %s", addr, got, certs.ServerCert)
		}
		copyTo(t, next.ServerKey, key)
		if got := served(); got != certs.ServerCert {
			t.Fatalf("%s, half rotated, serves %s; want the last good pair", addr, got)
		}
		copyTo(t, next.ServerCert, cert)
		if got := served(); got != next.ServerCert {
			t.Fatalf("%s, rotated, serves %s; want %s", addr, got, next.ServerCert)
		}
		if _, _, err := get("https://"+addr+"/healthz", clientTLS(t, next.CA, "", "")); err != nil {
			t.Fatalf("%s, rotated: %v", addr, err)
		}
	}
}

// In shard mode the peer protocol is served on the peer listener alone:
// the gRPC listener that clients reach does not serve it, and the peer
// listener refuses (and counts) a call without the members' secret.
func TestPeerListenerIsTheMembersAlone(t *testing.T) {
	secret := filepath.Join(t.TempDir(), "peer-secret")
	if err := os.WriteFile(secret, []byte("a-secret-of-the-members\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startWith(t, fmt.Sprintf("store: {mode: shard, peers: [127.0.0.1:1], peer_listen: 127.0.0.1:0, peer_secret_file: %s}\nlisteners: {drain: 0s}\npolicies: [{name: a, limit: 5/m}]\n", secret), Options{})
	a := s.Addrs()
	if a.Peer == "" || a.Peer == a.GRPC {
		t.Fatalf("peer listener %q, gRPC %q: want one of its own", a.Peer, a.GRPC)
	}
	batch := &shardv1.Batch{Version: shardv1.Version_VERSION_1, CallSizes: []uint32{1}, Keys: []byte("k"), KeyLengths: []uint32{1}, Algorithms: []uint32{0},
		Rates: []int64{1}, PeriodsUs: []int64{60_000_000}, Bursts: []int64{0}, Costs: []int64{1}, Flags: []uint32{0}, NowUnixUs: []int64{0}}
	take := func(addr, secret string) error {
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return err
		}
		defer conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if secret != "" {
			ctx = metadata.AppendToOutgoingContext(ctx, "sluice-peer-secret", secret)
		}
		st, err := shardv1.NewPeerClient(conn).Take(ctx)
		if err != nil {
			return err
		}
		st.Send(batch) // its error is io.EOF; the call's is Recv's
		_, err = st.Recv()
		return err
	}
	if err := take(a.GRPC, "a-secret-of-the-members"); status.Code(err) != codes.Unimplemented {
		t.Errorf("the peer protocol on the gRPC listener: %v; want Unimplemented", err)
	}
	if err := take(a.Peer, ""); status.Code(err) != codes.Unauthenticated {
		t.Errorf("a peer call without the secret: %v; want Unauthenticated", err)
	}
	if err := take(a.Peer, "a-guessed-secret"); status.Code(err) != codes.PermissionDenied {
		t.Errorf("a peer call with a wrong secret: %v; want PermissionDenied", err)
	}
	if err := take(a.Peer, "a-secret-of-the-members"); err != nil {
		t.Errorf("a member's call: %v", err)
	}
	resp, err := http.Get("http://" + a.HTTP + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, reason := range []string{"no_secret", "bad_secret"} {
		if want := fmt.Sprintf(`sluice_listener_refused_total{listener="peer",reason=%q} 1`, reason); !bytes.Contains(body, []byte(want)) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

func readAll(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func copyTo(t *testing.T, from, to string) {
	t.Helper()
	if err := os.WriteFile(to, readAll(t, from), 0o600); err != nil {
		t.Fatal(err)
	}
}

// With store.peer_tls the peer listener serves only a caller presenting
// a certificate of the members' CA: one without is refused at the
// handshake and counted.
func TestPeerListenerMutualTLS(t *testing.T) {
	certs, stranger := redistest.NewCerts(t), redistest.NewCerts(t)
	s := startWith(t, fmt.Sprintf("store: {mode: shard, peers: [127.0.0.1:1], peer_listen: 127.0.0.1:0, peer_tls: {cert_file: %s, key_file: %s, ca_file: %s}}\nlisteners: {drain: 0s}\npolicies: [{name: a, limit: 5/m}]\n",
		certs.ServerCert, certs.ServerKey, certs.CA), Options{})
	health := func(c *tls.Config) error {
		conn, err := grpc.NewClient(s.Addrs().Peer, grpc.WithTransportCredentials(credentials.NewTLS(c)))
		if err != nil {
			return err
		}
		defer conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err = healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
		return err
	}
	if err := health(clientTLS(t, certs.CA, certs.ServerCert, certs.ServerKey)); err != nil {
		t.Errorf("a member: %v", err)
	}
	for name, c := range map[string]*tls.Config{
		"no certificate":           clientTLS(t, certs.CA, "", ""),
		"another CA's certificate": clientTLS(t, certs.CA, stranger.ServerCert, stranger.ServerKey),
	} {
		if err := health(c); err == nil {
			t.Errorf("a caller with %s was answered", name)
		}
	}
	_, _, body, err := fetchTLS("http://"+s.Addrs().HTTP+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, reason := range []string{"no_certificate", "bad_certificate"} {
		if want := fmt.Sprintf(`sluice_listener_refused_total{listener="peer",reason=%q} 1`, reason); !bytes.Contains(body, []byte(want)) {
			t.Errorf("metrics lack %s", want)
		}
	}
}
