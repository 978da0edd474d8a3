package tlsfiles_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/tlsfiles"
)

// Files that cannot make a listener's or a client's TLS are an error at
// once, naming the listener and what is wrong; no files is plain TCP.
func TestFilesRefusedAtOnce(t *testing.T) {
	certs := redistest.NewCerts(t)
	empty := filepath.Join(t.TempDir(), "empty.pem")
	os.WriteFile(empty, nil, 0o600)
	for _, tt := range []struct {
		name  string
		files tlsfiles.Files
		want  string
	}{
		{"a key without its certificate", tlsfiles.Files{KeyFile: certs.ServerKey}, "cert_file and key_file are required"},
		{"a certificate without its key", tlsfiles.Files{CertFile: certs.ServerCert}, "cert_file and key_file go together"},
		{"a client CA alone", tlsfiles.Files{CAFile: certs.CA}, "cert_file and key_file are required"},
		{"a missing file", tlsfiles.Files{CertFile: "/nonexistent.crt", KeyFile: certs.ServerKey}, "/nonexistent.crt"},
		{"a key of another certificate", tlsfiles.Files{CertFile: certs.ServerCert, KeyFile: certs.ClientKey}, "private key does not match"},
		{"a CA file with no certificate", tlsfiles.Files{CertFile: certs.ServerCert, KeyFile: certs.ServerKey, CAFile: empty}, "no PEM certificate"},
	} {
		_, _, err := tlsfiles.Server(tt.files, "http", nil, nil)
		if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "http") {
			t.Errorf("%s: %v; want an error naming the listener and %q", tt.name, err, tt.want)
		}
	}
	if c, files, err := tlsfiles.Server(tlsfiles.Files{}, "http", nil, nil); c != nil || files != nil || err != nil {
		t.Errorf("no files: %v, %v, %v; want plain TCP", c, files, err)
	}
	if _, _, err := tlsfiles.Client(tlsfiles.Files{CertFile: certs.ClientCert, KeyFile: certs.ClientKey, CAFile: empty}, "peer", nil); err == nil {
		t.Error("a client with a CA file of no certificate: no error")
	}
}
