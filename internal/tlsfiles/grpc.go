package tlsfiles

import (
	"crypto/tls"
	"errors"
	"io"
	"net"
	"syscall"

	"google.golang.org/grpc/credentials"
)

// GRPC returns the transport credentials of a gRPC listener with c (from
// Server), which call refused with Handshake for each handshake that fails
// before its certificate is verified (the verification counts its own),
// such as a client speaking plain TCP; one that hangs up is not counted.
func GRPC(c *tls.Config, refused func(reason string)) credentials.TransportCredentials {
	return countedCreds{credentials.NewTLS(c), refused}
}

type countedCreds struct {
	credentials.TransportCredentials
	refused func(string)
}

func (cc countedCreds) ServerHandshake(conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	c, info, err := cc.TransportCredentials.ServerHandshake(conn)
	if err != nil && cc.refused != nil && !errors.Is(err, errRefused) && !hungUp(err) {
		cc.refused(Handshake)
	}
	return c, info, err
}

func (cc countedCreds) Clone() credentials.TransportCredentials {
	return countedCreds{cc.TransportCredentials.Clone(), cc.refused}
}

// hungUp reports whether err is the client's leaving mid-handshake.
func hungUp(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) || errors.Is(err, syscall.ECONNRESET)
}
