package server

import (
	"bytes"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"

	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/internal/rotated"
	"github.com/sluicehq/sluice/internal/tlsfiles"
	"github.com/sluicehq/sluice/shard"
)

// In shard mode the members talk on a listener of their own, the peer
// listener (store.peer_listen, -peer-listen), never the gRPC listener
// that clients reach: it serves the peer protocol and gRPC health (which
// static membership checks), to members only. A member proves itself by
// a certificate the members' CA signed (store.peer_tls: mutual TLS), by
// the members' secret (store.peer_secret_file), or both; what it is
// refused is counted in sluice_listener_refused_total{listener="peer"}.

// peers is the peer side of a shard member.
type peers struct {
	addr   string      // the peer listener's address
	tls    *tls.Config // the peer listener's TLS; nil: none
	auth   shard.Auth
	srv    *grpc.Server
	listen string // where it listens, once started
}

// openPeers reads the peer credentials of sh: the files are read now, so
// a missing or bad one is an error at start.
func (s *Server) openPeers(sh *config.Shard) (*peers, error) {
	p := &peers{addr: sh.Listen}
	if s.opts.PeerAddr != "" {
		p.addr = s.opts.PeerAddr
	}
	refused := s.listenRefused("peer")
	p.auth.Refused = refused
	if t := sh.TLS; t != (config.PeerTLS{}) {
		files := tlsfiles.Files{CertFile: t.CertFile, KeyFile: t.KeyFile, CAFile: t.CAFile}
		var err error
		if p.tls, err = s.listenerTLS("peer", files, "h2"); err != nil {
			return nil, fmt.Errorf("store.peer_tls: %w", err)
		}
		client, counted, err := tlsfiles.Client(files, "peer", s.log)
		if err != nil {
			return nil, fmt.Errorf("store.peer_tls: %w", err)
		}
		s.tlsFiles.add(counted)
		p.auth.TLS = client
	}
	if sh.SecretFile != "" {
		f, err := rotated.Open(sh.SecretFile, "store.peer_secret_file", secretLines, s.log)
		if err != nil {
			return nil, err
		}
		s.tlsFiles.add([]rotated.Counted{f})
		p.auth.Secrets = func() []string {
			secrets, _ := f.Read() // the last good ones while the file cannot be read
			return secrets
		}
	}
	if p.auth.TLS == nil && p.auth.Secrets == nil {
		return nil, errors.New("store: shard mode needs peer_tls or peer_secret_file: without either any process that reaches the peer listener is a member")
	}
	return p, nil
}

// secretLines parses a file of secrets, one a line; blank lines aside.
func secretLines(raw []byte) ([]string, error) {
	var out []string
	for line := range strings.Lines(string(raw)) {
		if line = strings.TrimSpace(line); line != "" {
			out = append(out, line)
		}
	}
	if len(out) == 0 {
		return nil, errors.New("no secret in it")
	}
	for _, sec := range out {
		if len(sec) < 16 {
			return nil, errors.New("a secret of fewer than 16 characters: use a random one, such as `openssl rand -base64 32`")
		}
	}
	return out, nil
}

// readGossipKeys reads the file of gossip keys, base64, one a line: each
// 16, 24 or 32 bytes (AES-128, -192, -256). It is read at start: a key is
// rotated by a rolling restart (shard.GossipOptions.Keys).
func readGossipKeys(path string) ([][]byte, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("store.gossip.key_file: %w", err)
	}
	keys, err := gossipKeys(raw)
	if err != nil {
		return nil, fmt.Errorf("store.gossip.key_file %s: %w", path, err)
	}
	return keys, nil
}

// gossipKeys parses gossip keys, base64, one a line.
func gossipKeys(raw []byte) ([][]byte, error) {
	var keys [][]byte
	for i, line := range bytes.Fields(raw) {
		k, err := base64.StdEncoding.DecodeString(string(line))
		if err != nil {
			return nil, fmt.Errorf("key %d is not base64: %w", i+1, err)
		}
		if n := len(k); n != 16 && n != 24 && n != 32 {
			return nil, fmt.Errorf("key %d is %d bytes: want 16, 24 or 32 (`openssl rand -base64 32`)", i+1, n)
		}
		keys = append(keys, k)
	}
	if len(keys) == 0 {
		return nil, errors.New("no key in it")
	}
	return keys, nil
}

// startPeers listens on the peer listener and serves the peer protocol
// and health there, with the listeners' bounds. The caller holds s.mu.
func (s *Server) startPeers(ss *shard.Store, lim config.Listeners) error {
	p := s.peers
	l, err := listen(p.addr, lim, func(ln net.Listener) net.Listener { return ln })
	if err != nil {
		return fmt.Errorf("peer listener: %w", err)
	}
	opts := grpcOptions(lim, s.recv)
	if p.tls != nil {
		opts = append(opts, grpc.Creds(tlsfiles.GRPC(p.tls, p.auth.Refused)))
	}
	p.srv = grpc.NewServer(opts...)
	ss.Register(p.srv)
	healthpb.RegisterHealthServer(p.srv, s.health)
	p.listen = l.Addr().String()
	s.addrs.Peer = p.listen
	go p.srv.Serve(l)
	return nil
}

// peerServer returns the peer listener's server, or nil.
func (s *Server) peerServer() *grpc.Server {
	if s.peers == nil {
		return nil
	}
	return s.peers.srv
}
