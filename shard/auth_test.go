package shard_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/pem"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"

	"github.com/sluicehq/sluice"
	shardv1 "github.com/sluicehq/sluice/api/shardv1"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/tlsfiles"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/shard"
)

// refusals counts refused peer calls and handshakes by reason.
type refusals struct {
	mu sync.Mutex
	n  map[string]int
}

func (r *refusals) add(reason string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.n == nil {
		r.n = map[string]int{}
	}
	r.n[reason]++
}

func (r *refusals) total() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, v := range r.n {
		n += v
	}
	return n
}

// security is one way members know each other: mutual TLS with files,
// a secret, or both.
type security struct {
	files   tlsfiles.Files // the members' certificate, key and CA
	secrets []string
}

// startSecureNodes starts n members, each a peer listener of its own with
// sec, counting what each refuses in refused.
func startSecureNodes(t *testing.T, n int, sec security, refused *refusals) []*node {
	t.Helper()
	lis, addrs := listeners(t, n)
	var nodes []*node
	for i := range lis {
		auth := shard.Auth{Refused: refused.add}
		var opts []grpc.ServerOption
		if sec.files.Set() {
			serverTLS, _, err := tlsfiles.Server(sec.files, "peer", nil, refused.add)
			if err != nil {
				t.Fatal(err)
			}
			if auth.TLS, _, err = tlsfiles.Client(sec.files, "peer", nil); err != nil {
				t.Fatal(err)
			}
			opts = append(opts, grpc.Creds(tlsfiles.GRPC(serverTLS, refused.add)))
		}
		if sec.secrets != nil {
			auth.Secrets = func() []string { return sec.secrets }
		}
		srv := grpc.NewServer(opts...)
		s, err := shard.New(shard.Options{
			Self: addrs[i], Local: memstore.New(memstore.Options{}), Interval: 100 * time.Millisecond, Auth: auth,
			Members: shard.Static(addrs[i], addrs, 50*time.Millisecond, auth.DialOptions()...),
		})
		if err != nil {
			t.Fatal(err)
		}
		s.Register(srv)
		healthpb.RegisterHealthServer(srv, health.NewServer())
		go srv.Serve(lis[i])
		t.Cleanup(func() { s.Close(); srv.Stop() })
		nodes = append(nodes, &node{addr: addrs[i], srv: srv, store: s})
	}
	until(t, "every member sees the others", seeAll(nodes, n))
	return nodes
}

// outsider is a process that reaches a member's peer port with
// credentials of its own (or none).
type outsider struct {
	name   string
	dial   []grpc.DialOption
	secret string // sent when set
}

// attacks are what an outsider tried: reset a held client's key, charge a
// victim's key before its first request (forced, and as a failover), hand
// a key over, and say a member leaves. Each is refused, and nothing
// changes.
func attack(t *testing.T, o outsider, addr, held, victim, member string) {
	t.Helper()
	conn, err := grpc.NewClient(addr, o.dial...)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	hour := sluice.Limit{Rate: 3, Period: time.Hour}
	call := func(key string, cost int64, flags uint32, reset bool) *shardv1.Batch {
		b := &shardv1.Batch{Version: shardv1.Version_VERSION_1, CallSizes: []uint32{1}, Keys: []byte(key), KeyLengths: []uint32{uint32(len(key))},
			Algorithms: []uint32{uint32(hour.Algorithm)}, Rates: []int64{hour.Rate}, PeriodsUs: []int64{hour.Period.Microseconds()}, Bursts: []int64{0},
			Costs: []int64{cost}, Flags: []uint32{flags}, NowUnixUs: []int64{0}}
		if reset {
			b.CallResets = []bool{true}
		}
		return b
	}
	for _, tt := range []struct {
		what  string
		batch *shardv1.Batch
	}{
		{"reset of a held key", call(held, 1, 0, true)},
		{"forced charge of a victim's key", call(victim, 3, uint32(shardv1.Flag_FLAG_FORCE), false)},
		{"failover call", call(victim, 3, uint32(shardv1.Flag_FLAG_FAILOVER|shardv1.Flag_FLAG_FORCE), false)},
		{"hand-off", call(victim, 3, uint32(shardv1.Flag_FLAG_HOP|shardv1.Flag_FLAG_HANDOFF|shardv1.Flag_FLAG_FORCE), false)},
		{"end of a hand-off", &shardv1.Batch{Version: shardv1.Version_VERSION_1, HandedOff: member}},
		{"leave", &shardv1.Batch{Version: shardv1.Version_VERSION_1, HandedOff: member, Leaving: true}},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if o.secret != "" {
			ctx = metadata.AppendToOutgoingContext(ctx, "sluice-peer-secret", o.secret)
		}
		st, err := shardv1.NewPeerClient(conn).Take(ctx)
		if err == nil {
			if err = st.Send(tt.batch); err == nil {
				_, err = st.Recv()
			}
		}
		cancel()
		if err == nil {
			t.Errorf("%s: the %s was answered; want refused", o.name, tt.what)
		}
	}
}

// A process that is not a member reaches a member's peer port: with no
// credentials, a certificate of another CA, or a wrong secret, its
// reset, forced charge, failover, hand-off and leave are refused and
// counted, and change nothing: the held client is still held, the
// victim's key is untouched, and the ring keeps both members. The
// members, with the right credentials, decide as one.
func TestPeerPortRefusesOutsiders(t *testing.T) {
	certs, stranger := redistest.NewCerts(t), redistest.NewCerts(t)
	members := tlsfiles.Files{CertFile: certs.ServerCert, KeyFile: certs.ServerKey, CAFile: certs.CA}
	strangerTLS, _, err := tlsfiles.Client(tlsfiles.Files{CertFile: stranger.ServerCert, KeyFile: stranger.ServerKey, CAFile: certs.CA}, "stranger", nil)
	if err != nil {
		t.Fatal(err)
	}
	noCertTLS, _, err := tlsfiles.Client(tlsfiles.Files{CAFile: certs.CA}, "stranger", nil)
	if err != nil {
		t.Fatal(err)
	}
	plain := grpc.WithTransportCredentials(insecure.NewCredentials())
	for _, tt := range []struct {
		name      string
		sec       security
		outsiders []outsider
	}{
		{"mutual TLS", security{files: members}, []outsider{
			{name: "no TLS", dial: []grpc.DialOption{plain}},
			{name: "no certificate", dial: []grpc.DialOption{grpc.WithTransportCredentials(credentials.NewTLS(noCertTLS))}},
			{name: "another CA's certificate", dial: []grpc.DialOption{grpc.WithTransportCredentials(credentials.NewTLS(strangerTLS))}},
		}},
		{"secret", security{secrets: []string{"members-secret", "next-secret"}}, []outsider{
			{name: "no secret", dial: []grpc.DialOption{plain}},
			{name: "wrong secret", dial: []grpc.DialOption{plain}, secret: "guessed"},
			{name: "secret's prefix", dial: []grpc.DialOption{plain}, secret: "members"},
		}},
		{"both", security{files: members, secrets: []string{"members-secret"}}, []outsider{
			{name: "certificate without the secret", dial: []grpc.DialOption{grpc.WithTransportCredentials(credentials.NewTLS(tlsConfigOf(t, members)))}},
			{name: "secret without a certificate", dial: []grpc.DialOption{grpc.WithTransportCredentials(credentials.NewTLS(noCertTLS))}, secret: "members-secret"},
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var refused refusals
			nodes := startSecureNodes(t, 2, tt.sec, &refused)
			front, owner := nodes[0], nodes[1]
			keys := ownedBy(front.store, owner.addr, 2)
			held, victim := keys[0], keys[1]
			hour := sluice.Limit{Rate: 3, Period: time.Hour}
			take := func(key string) sluice.Decision {
				t.Helper()
				d, err := front.store.Take(context.Background(), sluice.Request{Key: key, Limit: hour, Cost: 1})
				if err != nil {
					t.Fatalf("a member's forward: %v", err)
				}
				return d
			}
			for range 3 {
				if !take(held).Allowed {
					t.Fatal("a member's forward was denied within the limit")
				}
			}
			if take(held).Allowed {
				t.Fatal("the fourth of 3/h was allowed")
			}
			if front.store.Forwarded() == 0 {
				t.Fatal("nothing was forwarded: the test did not reach the owner")
			}
			for _, o := range tt.outsiders {
				before := refused.total()
				attack(t, o, owner.addr, held, victim, front.addr)
				if refused.total() == before {
					t.Errorf("%s: refused and not counted", o.name)
				}
			}
			if take(held).Allowed {
				t.Error("the held client's key was reset by an outsider")
			}
			if d := take(victim); !d.Allowed || d.Remaining != 2 {
				t.Errorf("the victim's first request: %+v; want allowed with 2 left", d)
			}
			for _, nd := range nodes {
				if len(nd.store.Members()) != 2 {
					t.Errorf("%s sees %v after the outsiders' leave; want both members", nd.addr, nd.store.Members())
				}
			}
		})
	}
}

// tlsConfigOf is a member's client TLS for files.
func tlsConfigOf(t *testing.T, files tlsfiles.Files) *tls.Config {
	t.Helper()
	c, _, err := tlsfiles.Client(files, "member", nil)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// A member's certificate rotated on disk (to one of a new CA, which the
// members' bundle holds beside the old) is the one its peer port serves
// from the next connection, and the members still decide together.
func TestPeerCertificateRotation(t *testing.T) {
	certs, next := redistest.NewCerts(t), redistest.NewCerts(t)
	dir := t.TempDir()
	files := tlsfiles.Files{CertFile: dir + "/peer.crt", KeyFile: dir + "/peer.key", CAFile: dir + "/ca.crt"}
	copyFile(t, certs.ServerCert, files.CertFile)
	copyFile(t, certs.ServerKey, files.KeyFile)
	bundle := append(readFile(t, certs.CA), readFile(t, next.CA)...)
	if err := os.WriteFile(files.CAFile, bundle, 0o600); err != nil {
		t.Fatal(err)
	}
	var refused refusals
	nodes := startSecureNodes(t, 2, security{files: files}, &refused)
	c := tlsConfigOf(t, files)
	c.NextProtos = []string{"h2"} // gRPC's, which its listener requires
	var leaf []byte
	verify := c.VerifyConnection
	c.VerifyConnection = func(cs tls.ConnectionState) error {
		leaf = cs.PeerCertificates[0].Raw
		return verify(cs)
	}
	served := func() []byte {
		t.Helper()
		conn, err := tls.Dial("tcp", nodes[1].addr, c)
		if err != nil {
			t.Fatalf("a member's handshake: %v", err)
		}
		defer conn.Close()
		// The server's first frame: its side of the handshake is done, so
		// the close is no handshake it fails.
		conn.Write([]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"))
		if _, err := conn.Read(make([]byte, 1)); err != nil {
			t.Fatalf("a member's connection: %v", err)
		}
		return leaf
	}
	if !sameCert(t, served(), certs.ServerCert) {
		t.Fatal("the peer port does not serve the member's certificate")
	}
	copyFile(t, next.ServerKey, files.KeyFile) // half rotated: the last good pair stays
	if !sameCert(t, served(), certs.ServerCert) {
		t.Fatal("a half-rotated pair was served")
	}
	copyFile(t, next.ServerCert, files.CertFile)
	if !sameCert(t, served(), next.ServerCert) {
		t.Fatal("the rotated certificate is not served")
	}
	for _, nd := range nodes {
		nd.store.Close() // new connections, on the rotated certificates
	}
	s, err := shard.New(shard.Options{Self: "front", Local: memstore.New(memstore.Options{}), Auth: shard.Auth{TLS: c},
		Members: fixedMembers{nodes[1].addr}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	key := ownedBy(s, nodes[1].addr, 1)[0]
	if _, err := s.Take(context.Background(), sluice.Request{Key: key, Limit: sluice.Limit{Rate: 3, Period: time.Hour}, Cost: 1}); err != nil || s.Forwarded() != 1 {
		t.Fatalf("a member with the rotated certificate: %v, %d forwarded", err, s.Forwarded())
	}
	if n := refused.total(); n != 0 {
		t.Fatalf("%d calls of members refused: %v", n, refused.n)
	}
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	if err := os.WriteFile(to, readFile(t, from), 0o600); err != nil {
		t.Fatal(err)
	}
}

// sameCert reports whether der is the certificate in the PEM file path.
func sameCert(t *testing.T, der []byte, path string) bool {
	t.Helper()
	block, _ := pem.Decode(readFile(t, path))
	return block != nil && bytes.Equal(block.Bytes, der)
}

// ownedBy returns keys that s's ring gives to owner.
func ownedBy(s *shard.Store, owner string, n int) []string {
	var keys []string
	for i := 0; len(keys) < n; i++ {
		if k := fmt.Sprint("k", i); s.Owner(k) == owner {
			keys = append(keys, k)
		}
	}
	return keys
}
