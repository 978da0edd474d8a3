package server

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"time"

	"golang.org/x/net/netutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"

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

// listenGRPC is Listen for the gRPC listener, its connections under the
// rapid-reset guard (resetguard.go); onGoAway is called for each
// connection the guard sends away.
func listenGRPC(addr string, l config.Listeners, onGoAway func()) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	return netutil.LimitListener(&guardListener{Listener: ln, onGoAway: onGoAway}, l.MaxConnections), nil
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
// without calls; clients may not ping more often than every 10 s. Every
// call must have sent its request within ReadTimeout (receiveDeadline),
// and a connection buffers at most connWindow bytes of the requests not
// yet read (flow control with fixed windows: grpc-go's automatic window
// growth would let one connection buffer up to 16 MiB).
func grpcOptions(l config.Listeners, refused func(reason string)) []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ConnectionTimeout(l.ReadHeaderTimeout),
		grpc.MaxConcurrentStreams(uint32(min(l.MaxStreams, 1<<31))),
		grpc.MaxRecvMsgSize(maxBodyBytes),
		grpc.ForceServerCodecV2(newRLSCodec()),
		grpc.InitialWindowSize(streamWindow),
		grpc.InitialConnWindowSize(connWindow),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
		grpc.KeepaliveParams(keepalive.ServerParameters{
			MaxConnectionIdle: l.IdleTimeout,
			Time:              time.Minute,
			Timeout:           20 * time.Second,
		}),
		grpc.InTapHandle(receiveDeadline(l.ReadTimeout, refused)),
		grpc.ChainUnaryInterceptor(received),
		grpc.ChainStreamInterceptor(receivedStream),
	}
}

// The flow-control windows of the gRPC listener: a check is a few hundred
// bytes, so these bound memory without slowing any real call.
const (
	streamWindow = 64 << 10
	connWindow   = 1 << 20
)

// errReceiveTimeout ends a call whose request did not arrive in time.
var errReceiveTimeout = status.Error(codes.DeadlineExceeded, "the request did not arrive within listeners.read_timeout")

// receiveDeadline gives each call until d to deliver its request: grpc-go
// starts a call's handler only once its request message is read, and a
// client that sends the headers and part of a message would otherwise
// hold the call's goroutine and buffers for as long as the connection
// lives. The call's context is cancelled at d unless the request has
// arrived (received stops the timer); refused counts each call cut.
func receiveDeadline(d time.Duration, refused func(string)) tap.ServerInHandle {
	return func(ctx context.Context, _ *tap.Info) (context.Context, error) {
		ctx, cancel := context.WithCancelCause(ctx)
		t := time.AfterFunc(d, func() {
			if ctx.Err() == nil {
				refused("receive_timeout")
				cancel(errReceiveTimeout)
			}
		})
		// A call that ends first (reset by its client) frees its timer.
		unwatch := context.AfterFunc(ctx, func() { t.Stop() })
		return context.WithValue(ctx, receiveTimerKey{}, &receiveTimer{t, unwatch}), nil
	}
}

type receiveTimerKey struct{}

// receiveTimer is a call's receive deadline and the watch on its end.
type receiveTimer struct {
	t       *time.Timer
	unwatch func() bool
}

// stopReceiveTimer stops the call's receive deadline: its request is here.
func stopReceiveTimer(ctx context.Context) {
	if rt, ok := ctx.Value(receiveTimerKey{}).(*receiveTimer); ok {
		rt.t.Stop()
		rt.unwatch()
	}
}

// received runs once a unary call's request is decoded.
func received(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	stopReceiveTimer(ctx)
	return h(ctx, req)
}

// receivedStream runs as a stream opens: a stream reads its messages
// itself, as long as it lives, so only its opening is under the deadline.
func receivedStream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	stopReceiveTimer(ss.Context())
	return h(srv, ss)
}
