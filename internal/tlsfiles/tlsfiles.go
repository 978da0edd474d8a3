// Package tlsfiles makes the TLS configs of sluice's listeners and clients
// from PEM files that are rotated while the process runs (cert-manager, a
// Kubernetes Secret mounted as a volume): each handshake reads the files
// again (rotated.File), so a renewed certificate or CA bundle is used by
// the next connection without a restart, and a file half-written at that
// moment leaves the last good one in use.
//
// A certificate and its key are one pair, read as one: while the two do
// not match (one rotated, the other not yet), the last pair that did is
// used. Client certificates are verified against the CA bundle as it is at
// each handshake, by the chain and the key usage, not by name: the CA is
// what a listener trusts, so give each listener a CA that signs only those
// who may call it.
package tlsfiles

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"

	"github.com/sluicehq/sluice/internal/rotated"
)

// Files names the PEM files of one side of a connection.
type Files struct {
	// CertFile and KeyFile are this side's certificate (with its
	// intermediates) and its private key.
	CertFile, KeyFile string
	// CAFile is the bundle of the CAs that verify the other side: on a
	// listener, its clients' certificates (mutual TLS: a client without
	// one it signed is refused); on a client, the server's.
	CAFile string
}

// Set reports whether any file is named.
func (f Files) Set() bool { return f != Files{} }

// Refusal reasons, given to a listener's refused callback.
const (
	NoCertificate  = "no_certificate"  // the client sent none
	BadCertificate = "bad_certificate" // not signed by the CA bundle, expired, or not for client auth
)

// Pair opens certFile and keyFile, a certificate and its key, as one file
// read again at each use; what names them in errors and log lines. A pair
// that cannot be read or does not match now is Pair's error.
func Pair(certFile, keyFile, what string, log *slog.Logger) (*rotated.File[*tls.Certificate], error) {
	if (certFile == "") != (keyFile == "") {
		return nil, fmt.Errorf("%s: cert_file and key_file go together: give both or neither", what)
	}
	return rotated.Open(certFile, what, func(certPEM []byte) (*tls.Certificate, error) {
		keyPEM, err := os.ReadFile(keyFile)
		if err != nil {
			return nil, err
		}
		cert, err := tls.X509KeyPair(certPEM, keyPEM)
		return &cert, err
	}, log)
}

// CAs opens a PEM bundle of certificate authorities as a file read again
// at each use.
func CAs(file, what string, log *slog.Logger) (*rotated.File[*x509.CertPool], error) {
	return rotated.Open(file, what, ParseCAs, log)
}

// ParseCAs parses a PEM bundle of certificate authorities.
func ParseCAs(pem []byte) (*x509.CertPool, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, errors.New("no PEM certificate in it")
	}
	return pool, nil
}

// Server returns the TLS config of a listener: f's certificate, and with
// f.CAFile mutual TLS, a client refused unless its certificate chains to
// that bundle for client auth. what names the listener in errors and log
// lines; refused, if set, is called with NoCertificate or BadCertificate
// for each handshake refused. It returns nil and no error when f names no
// file (the listener is plain TCP), and the files it reads again, for
// counting their failures. The files are read now: a missing or bad one is
// its error.
func Server(f Files, what string, log *slog.Logger, refused func(reason string)) (*tls.Config, []rotated.Counted, error) {
	if !f.Set() {
		return nil, nil, nil
	}
	if f.CertFile == "" {
		return nil, nil, fmt.Errorf("%s TLS: cert_file and key_file are required to serve TLS", what)
	}
	pair, err := Pair(f.CertFile, f.KeyFile, what+" TLS certificate", log)
	if err != nil {
		return nil, nil, err
	}
	files := []rotated.Counted{pair}
	c := &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			cert, _ := pair.Read() // the last good pair while the files are half rotated
			return cert, nil
		},
	}
	if f.CAFile == "" {
		return c, files, nil
	}
	ca, err := CAs(f.CAFile, what+" TLS client CA file", log)
	if err != nil {
		return nil, nil, err
	}
	files = append(files, ca)
	// Verified here rather than by crypto/tls (RequireAndVerifyClientCert),
	// so that the bundle is the one on disk at each handshake and each
	// refusal is counted by its reason.
	c.ClientAuth = tls.RequestClientCert
	c.VerifyConnection = func(cs tls.ConnectionState) error {
		pool, _ := ca.Read()
		reason, err := verify(cs, pool, x509.ExtKeyUsageClientAuth)
		if err != nil && refused != nil {
			refused(reason)
		}
		return err
	}
	return c, files, nil
}

// Client returns the TLS config of a client that presents f's certificate
// (if any) and verifies the server's chain against f.CAFile as it is at
// each handshake, not its name (the CA is what it trusts). Without
// f.CAFile it verifies the server as crypto/tls does, with the system's
// CAs and the name dialled. It returns nil and no error when f names no
// file.
func Client(f Files, what string, log *slog.Logger) (*tls.Config, []rotated.Counted, error) {
	if !f.Set() {
		return nil, nil, nil
	}
	c := &tls.Config{MinVersion: tls.VersionTLS12}
	var files []rotated.Counted
	if f.CertFile != "" || f.KeyFile != "" {
		pair, err := Pair(f.CertFile, f.KeyFile, what+" TLS certificate", log)
		if err != nil {
			return nil, nil, err
		}
		files = append(files, pair)
		c.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			cert, _ := pair.Read()
			return cert, nil
		}
	}
	if f.CAFile != "" {
		ca, err := CAs(f.CAFile, what+" TLS CA file", log)
		if err != nil {
			return nil, nil, err
		}
		files = append(files, ca)
		// crypto/tls verifies the chain and the name together, or neither:
		// off, and the chain verified here.
		c.InsecureSkipVerify = true
		c.VerifyConnection = func(cs tls.ConnectionState) error {
			pool, _ := ca.Read()
			_, err := verify(cs, pool, x509.ExtKeyUsageServerAuth)
			return err
		}
	}
	return c, files, nil
}

// VerifyChain returns nil when the other side's certificate of cs chains
// to pool (nil: the system's) for usage, whatever name it carries; for a
// tls.Config's VerifyConnection.
func VerifyChain(cs tls.ConnectionState, pool *x509.CertPool, usage x509.ExtKeyUsage) error {
	_, err := verify(cs, pool, usage)
	return err
}

// verify is VerifyChain, with the reason it refuses.
func verify(cs tls.ConnectionState, pool *x509.CertPool, usage x509.ExtKeyUsage) (string, error) {
	if len(cs.PeerCertificates) == 0 {
		return NoCertificate, fmt.Errorf("%w: a certificate is required", errRefused)
	}
	opts := x509.VerifyOptions{Roots: pool, Intermediates: x509.NewCertPool(), KeyUsages: []x509.ExtKeyUsage{usage}}
	for _, cert := range cs.PeerCertificates[1:] {
		opts.Intermediates.AddCert(cert)
	}
	if _, err := cs.PeerCertificates[0].Verify(opts); err != nil {
		return BadCertificate, fmt.Errorf("%w: %w", errRefused, err)
	}
	return "", nil
}

// Handshake is the refusal reason of a handshake that failed before any
// certificate was looked at: a client speaking plain TCP, or TLS this
// listener does not (GRPC counts it).
const Handshake = "handshake"

// errRefused marks the errors of verify, counted where they happen.
var errRefused = errors.New("tls: refused")
