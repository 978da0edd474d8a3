package shard

import (
	"context"
	"crypto/subtle"
	"crypto/tls"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	grpcpeer "google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// Auth says who is a member: who may call this instance's peer service,
// and how it proves itself to its peers. The peer service decides keys,
// forces charges, takes hand-offs and drops members that say they leave,
// so a caller it admits can reset or exhaust anyone's limit and split
// the ring: serve it on a listener of its own, reachable only by the
// members, with TLS, a secret, or both. The zero value admits anyone, in
// clear.
type Auth struct {
	// TLS, if set, is the TLS of the calls to peers, with the
	// certificate this member presents; and a call is served only on a
	// connection whose client presented a certificate, which the peer
	// listener's TLS (grpc.Creds) must verify: tlsfiles.Server does.
	TLS *tls.Config
	// Secrets, if set, returns the shared secrets: the first is sent with
	// every call to a peer, and a call is served only when it carries one
	// of them. Several let a secret be rotated without a refused call: add
	// the new one second everywhere, then first, then drop the old.
	Secrets func() []string
	// Refused, if set, is called with the reason of each peer call
	// refused: RefusedNoCertificate, RefusedNoSecret, RefusedBadSecret.
	Refused func(reason string)
}

// The reasons a peer call is refused (Auth.Refused).
const (
	RefusedNoCertificate = "no_certificate"
	RefusedNoSecret      = "no_secret"
	RefusedBadSecret     = "bad_secret"
)

// secretHeader is the metadata that carries a call's secret.
const secretHeader = "sluice-peer-secret"

// DialOptions are the options of a connection to a peer: its TLS, or
// none, and the secret sent with each call.
func (a *Auth) DialOptions() []grpc.DialOption {
	creds := insecure.NewCredentials()
	if a.TLS != nil {
		creds = credentials.NewTLS(a.TLS)
	}
	opts := []grpc.DialOption{grpc.WithTransportCredentials(creds)}
	if a.Secrets != nil {
		opts = append(opts, grpc.WithPerRPCCredentials(secretCreds{a}))
	}
	return opts
}

// admit returns nil for a call from a member, and else the status that
// refuses it, counted.
func (a *Auth) admit(ctx context.Context) error {
	if a.TLS != nil {
		p, _ := grpcpeer.FromContext(ctx)
		var ti credentials.TLSInfo
		if p != nil {
			ti, _ = p.AuthInfo.(credentials.TLSInfo)
		}
		if len(ti.State.PeerCertificates) == 0 {
			return a.refuse(RefusedNoCertificate, codes.Unauthenticated, "shard: peer calls need a member's TLS certificate")
		}
	}
	if a.Secrets != nil {
		md, _ := metadata.FromIncomingContext(ctx)
		got := md.Get(secretHeader)
		if len(got) != 1 {
			return a.refuse(RefusedNoSecret, codes.Unauthenticated, "shard: peer calls need the members' secret")
		}
		ok := 0
		for _, s := range a.Secrets() {
			ok |= subtle.ConstantTimeCompare([]byte(got[0]), []byte(s))
		}
		if ok != 1 {
			return a.refuse(RefusedBadSecret, codes.PermissionDenied, "shard: the peer secret is not the members'")
		}
	}
	return nil
}

func (a *Auth) refuse(reason string, code codes.Code, msg string) error {
	if a.Refused != nil {
		a.Refused(reason)
	}
	return status.Error(code, msg)
}

// secretCreds sends the first secret with each call.
type secretCreds struct{ a *Auth }

func (c secretCreds) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	s := c.a.Secrets()
	if len(s) == 0 {
		return nil, status.Error(codes.Unauthenticated, "shard: no peer secret to send")
	}
	return map[string]string{secretHeader: s[0]}, nil
}

func (secretCreds) RequireTransportSecurity() bool { return false }
