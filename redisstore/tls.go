package redisstore

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strconv"
)

// TLS configures the connection's TLS. Any field set turns TLS on, as a
// rediss:// URL does; the zero value leaves the URL's choice.
type TLS struct {
	// CAFile is a PEM bundle of the certificate authorities that verify
	// the server. Empty: the system's.
	CAFile string
	// CertFile and KeyFile are a PEM client certificate and its key, for
	// servers that ask for one (tls-auth-clients yes, Redis's default).
	// They are read again at each new connection, so a rotated
	// certificate is used without a restart.
	CertFile, KeyFile string
	// ServerName is the name the server's certificate must carry. Empty:
	// the host of the URL.
	ServerName string
	// InsecureSkipVerify accepts any server certificate: for tests only.
	InsecureSkipVerify bool
}

func (t TLS) set() bool { return t != TLS{} }

// tlsParams are the URL parameters Open reads into TLS, and removes before
// the rest of the URL is parsed.
var tlsParams = []string{"tls_ca_file", "tls_cert_file", "tls_key_file", "tls_server_name", "tls_insecure_skip_verify"}

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
	if v := q.Get("tls_insecure_skip_verify"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return t, fmt.Errorf("redisstore: tls_insecure_skip_verify=%q: want true or false", v)
		}
		t.InsecureSkipVerify = t.InsecureSkipVerify || b
	}
	for _, p := range tlsParams {
		q.Del(p)
	}
	u.RawQuery = q.Encode()
	return t, nil
}

// config returns the tls.Config of t over base (the URL's, or nil). The
// files are read now, so that a missing or bad one is an error of Open.
func (t TLS) config(base *tls.Config) (*tls.Config, error) {
	c := &tls.Config{MinVersion: tls.VersionTLS12}
	if base != nil {
		c = base.Clone()
	}
	if t.CAFile != "" {
		pem, err := os.ReadFile(t.CAFile)
		if err != nil {
			return nil, fmt.Errorf("redisstore: tls ca_file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("redisstore: tls ca_file %s: no PEM certificate in it", t.CAFile)
		}
		c.RootCAs = pool
	}
	if (t.CertFile == "") != (t.KeyFile == "") {
		return nil, errors.New("redisstore: tls: cert_file and key_file go together: give both or neither")
	}
	if t.CertFile != "" {
		if _, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile); err != nil {
			return nil, fmt.Errorf("redisstore: tls client certificate: %w", err)
		}
		certFile, keyFile := t.CertFile, t.KeyFile
		c.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			cert, err := tls.LoadX509KeyPair(certFile, keyFile)
			if err != nil {
				return nil, fmt.Errorf("redisstore: tls client certificate: %w", err)
			}
			return &cert, nil
		}
	}
	if t.ServerName != "" {
		c.ServerName = t.ServerName
	}
	if t.InsecureSkipVerify {
		c.InsecureSkipVerify = true
	}
	return c, nil
}
