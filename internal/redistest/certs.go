package redistest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// Certs are PEM files made for one test: a certificate authority, a
// server certificate it signed for 127.0.0.1 and localhost, and a client
// certificate it signed.
type Certs struct {
	CA                    string
	ServerCert, ServerKey string
	ClientCert, ClientKey string
}

// NewCerts makes a CA and the certificates it signs, in a directory of
// t's. Each call makes a CA of its own: another call's certificates are
// not trusted by it.
func NewCerts(t testing.TB) *Certs {
	t.Helper()
	dir := t.TempDir()
	c := &Certs{
		CA:         filepath.Join(dir, "ca.crt"),
		ServerCert: filepath.Join(dir, "server.crt"), ServerKey: filepath.Join(dir, "server.key"),
		ClientCert: filepath.Join(dir, "client.crt"), ClientKey: filepath.Join(dir, "client.key"),
	}
	caKey := newKey(t)
	ca := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "sluice test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		KeyUsage:              x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
	}
	caDER := sign(t, ca, ca, caKey, caKey)
	writePEM(t, c.CA, "CERTIFICATE", caDER)
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	leaf := func(serial int64, name string, usage []x509.ExtKeyUsage, certFile, keyFile string) {
		key := newKey(t)
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial),
			Subject:      pkix.Name{CommonName: name},
			NotBefore:    time.Now().Add(-time.Hour),
			NotAfter:     time.Now().Add(24 * time.Hour),
			KeyUsage:     x509.KeyUsageDigitalSignature,
			ExtKeyUsage:  usage,
			DNSNames:     []string{"localhost"},
			IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		}
		writePEM(t, certFile, "CERTIFICATE", sign(t, tmpl, caCert, key, caKey))
		der, err := x509.MarshalECPrivateKey(key)
		if err != nil {
			t.Fatal(err)
		}
		writePEM(t, keyFile, "EC PRIVATE KEY", der)
	}
	// The server's is a client's too: Cluster nodes and replicas connect
	// to each other with it.
	leaf(2, "localhost", []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}, c.ServerCert, c.ServerKey)
	leaf(3, "sluice", []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, c.ClientCert, c.ClientKey)
	return c
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func sign(t testing.TB, tmpl, parent *x509.Certificate, key, parentKey *ecdsa.PrivateKey) []byte {
	t.Helper()
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		t.Fatal(err)
	}
	return der
}

func writePEM(t testing.TB, path, kind string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// Config is a client's TLS config: the CA trusted, the client
// certificate presented.
func (c *Certs) Config() *tls.Config {
	pem, _ := os.ReadFile(c.CA)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	cert, _ := tls.LoadX509KeyPair(c.ClientCert, c.ClientKey)
	return &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
}

// cliFlags are redis-cli's flags for a server with these certificates;
// none for a nil Certs.
func (c *Certs) cliFlags() []string {
	if c == nil {
		return nil
	}
	return []string{"--tls", "--cacert", c.CA, "--cert", c.ClientCert, "--key", c.ClientKey}
}
