package server

import (
	"log/slog"
	"net"
	"net/http"
	"time"

	"golang.org/x/net/netutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"

	"github.com/sluicehq/sluice/config"
)

// Listen listens on addr, accepting at most l.MaxConnections connections
// at once: more wait in the kernel's backlog until one closes, so a flood
// of connections cannot take every file descriptor.
func Listen(addr string, l config.Listeners) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	return netutil.LimitListener(ln, l.MaxConnections), nil
}

// HTTPServer returns an http.Server for h bounded by l: header, body,
// answer and idle timeouts and a header size, so that no client can hold
// a connection open. proxy says to use the proxy's read and write
// timeouts, for uploads and streamed answers.
func HTTPServer(h http.Handler, l config.Listeners, proxy bool, log *slog.Logger) *http.Server {
	read, write := l.ReadTimeout, l.WriteTimeout
	if proxy {
		read, write = l.ProxyTimeout, l.ProxyTimeout
	}
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: l.ReadHeaderTimeout,
		ReadTimeout:       read,
		WriteTimeout:      write,
		IdleTimeout:       l.IdleTimeout,
		MaxHeaderBytes:    l.MaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
}

// grpcOptions bounds the gRPC listener as l bounds HTTP ones: a
// connection must finish its handshake within the header timeout, carry
// at most MaxStreams calls at once, and is closed after IdleTimeout
// without calls; clients may not ping more often than every 10 s.
func grpcOptions(l config.Listeners) []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ConnectionTimeout(l.ReadHeaderTimeout),
		grpc.MaxConcurrentStreams(uint32(min(l.MaxStreams, 1<<31))),
		grpc.MaxRecvMsgSize(maxBodyBytes),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
		grpc.KeepaliveParams(keepalive.ServerParameters{
			MaxConnectionIdle: l.IdleTimeout,
			Time:              time.Minute,
			Timeout:           20 * time.Second,
		}),
	}
}
