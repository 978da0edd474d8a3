package redisstore

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strconv"

	"github.com/sluicehq/sluice/internal/rotated"
	"github.com/sluicehq/sluice/internal/tlsfiles"
)

// TLS configures the connection's TLS. Any field set turns TLS on, as a
// rediss:// URL does; the zero value leaves the URL's choice.
type TLS struct {
	// CAFile is a PEM bundle of the certificate authorities that verify
	// the server. Empty: the system's. It is read again at each new
	// connection, so that a bundle rotated on disk (a new CA added before
	// the server's certificate moves to it) is used without a restart; a
	// file that cannot be read then, or holds no certificate, leaves the
	// last good bundle in use, and a connection it fails says so.
	CAFile string
	// CertFile and KeyFile are a PEM client certificate and its key, for
	// servers that ask for one (tls-auth-clients yes, Redis's default).
	// They are read again at each new connection, so a rotated
	// certificate is used without a restart; while the two do not make a
	// pair (one rotated, the other not yet), the last pair that did is.
	CertFile, KeyFile string
	// ServerName is the name the server's certificate must carry. Empty:
	// the host of the URL.
	ServerName string
	// SkipHostnameVerification verifies the server's certificate chain
	// against the CAs, but not the name it carries: for servers reached by
	// an address their certificate does not name (envoyproxy/ratelimit's
	// REDIS_TLS_SKIP_HOSTNAME_VERIFICATION).
	SkipHostnameVerification bool
	// InsecureSkipVerify accepts any server certificate: for tests only.
	InsecureSkipVerify bool
}

func (t TLS) set() bool { return t != TLS{} }

// tlsParams are the URL parameters Open reads into TLS, and removes before
// the rest of the URL is parsed.
var tlsParams = []string{"tls_ca_file", "tls_cert_file", "tls_key_file", "tls_server_name", "tls_skip_hostname_verification", "tls_insecure_skip_verify"}

// tlsFromURL takes the tls_* parameters out of u's query into t, where t
// does not set the field already (a store's fields win over its URL's).
func tlsFromURL(u *url.URL, t TLS) (TLS, error) {
	q := u.Query()
	pick := func(dst *string, name string) {
		if v := q.Get(name); v != "" && *dst == "" {
			*dst = v
		}
	}
	pick(&t.CAFile, "tls_ca_file")
	pick(&t.CertFile, "tls_cert_file")
	pick(&t.KeyFile, "tls_key_file")
	pick(&t.ServerName, "tls_server_name")
	for name, dst := range map[string]*bool{"tls_skip_hostname_verification": &t.SkipHostnameVerification, "tls_insecure_skip_verify": &t.InsecureSkipVerify} {
		if v := q.Get(name); v != "" {
			b, err := strconv.ParseBool(v)
			if err != nil {
				return t, fmt.Errorf("redisstore: %s=%q: want true or false", name, v)
			}
			*dst = *dst || b
		}
	}
	for _, p := range tlsParams {
		q.Del(p)
	}
	u.RawQuery = q.Encode()
	return t, nil
}

// config returns the tls.Config of t over base (the URL's, or nil), and
// the CA bundle that a dial must read again (nil without CAFile), which
// tells log of its failures; files gets each file read again. The files
// are read now, so that a missing or bad one is an error of Open.
func (t TLS) config(base *tls.Config, log *slog.Logger, files *[]rotated.Counted) (*tls.Config, *rotated.File[*x509.CertPool], error) {
	c := &tls.Config{MinVersion: tls.VersionTLS12}
	if base != nil {
		c = base.Clone()
	}
	var ca *rotated.File[*x509.CertPool]
	if t.CAFile != "" {
		var err error
		if ca, err = tlsfiles.CAs(t.CAFile, "redis TLS ca_file", log); err != nil {
			return nil, nil, fmt.Errorf("redisstore: %w", err)
		}
		*files = append(*files, ca)
		c.RootCAs = ca.Last()
	}
	if t.CertFile != "" || t.KeyFile != "" {
		pair, err := tlsfiles.Pair(t.CertFile, t.KeyFile, "redis TLS client certificate", log)
		if err != nil {
			return nil, nil, fmt.Errorf("redisstore: tls: %w", err)
		}
		*files = append(*files, pair)
		c.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			cert, _ := pair.Read() // the last good pair while the two files are half rotated
			return cert, nil
		}
	}
	if t.ServerName != "" {
		c.ServerName = t.ServerName
	}
	if t.SkipHostnameVerification && !t.InsecureSkipVerify {
		// crypto/tls verifies the chain and the name together, or neither:
		// off, and the chain verified here.
		c.InsecureSkipVerify = true
		roots := c.RootCAs // nil: the system's
		c.VerifyConnection = func(cs tls.ConnectionState) error {
			pool := roots
			if ca != nil {
				pool = ca.Last() // as the dial read it
			}
			return tlsfiles.VerifyChain(cs, pool, x509.ExtKeyUsageServerAuth)
		}
	}
	if t.InsecureSkipVerify {
		c.InsecureSkipVerify = true
	}
	return c, ca, nil
}

// caDialer wraps dial (nil: rueidis's own) so that each TLS connection is
// verified with the CA bundle as it is now. A connection refused while the
// file could not be read names that as the likely cause.
func caDialer(ca *rotated.File[*x509.CertPool], dial func(context.Context, string, *net.Dialer, *tls.Config) (net.Conn, error)) func(context.Context, string, *net.Dialer, *tls.Config) (net.Conn, error) {
	return func(ctx context.Context, dst string, d *net.Dialer, cfg *tls.Config) (net.Conn, error) {
		var stale error
		if cfg != nil {
			cfg = cfg.Clone()
			cfg.RootCAs, stale = ca.Read()
		}
		conn, err := dialVia(ctx, dial, dst, d, cfg)
		if err != nil && stale != nil {
			err = fmt.Errorf("%w (verified with the CA bundle last read: %v)", err, stale)
		}
		return conn, err
	}
}

// dialVia dials dst with dial, or as rueidis does when dial is nil: over
// TLS when cfg is set.
func dialVia(ctx context.Context, dial func(context.Context, string, *net.Dialer, *tls.Config) (net.Conn, error), dst string, d *net.Dialer, cfg *tls.Config) (net.Conn, error) {
	switch {
	case dial != nil:
		return dial(ctx, dst, d, cfg)
	case cfg != nil:
		return (&tls.Dialer{NetDialer: d, Config: cfg}).DialContext(ctx, "tcp", dst)
	}
	return d.DialContext(ctx, "tcp", dst)
}
