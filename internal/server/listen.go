package server

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"sync"
	"time"

	"golang.org/x/net/netutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"

	"github.com/sluicehq/sluice/config"
)

// listen listens on addr, wraps the listener, and accepts at most
// l.MaxConnections connections at once: more wait in the kernel's backlog
// until one closes, so a flood of connections cannot take every file
// descriptor. Server.listen adds a listener's TLS.
func listen(addr string, l config.Listeners, wrap func(net.Listener) net.Listener) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	return netutil.LimitListener(wrap(ln), l.MaxConnections), nil
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
func grpcOptions(l config.Listeners, recv *receiveWatch) []grpc.ServerOption {
	return append([]grpc.ServerOption{
		grpc.ConnectionTimeout(l.ReadHeaderTimeout),
		grpc.MaxConcurrentStreams(uint32(min(l.MaxStreams, 1<<31))),
		grpc.MaxRecvMsgSize(maxBodyBytes),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
		grpc.KeepaliveParams(keepalive.ServerParameters{
			MaxConnectionIdle: l.IdleTimeout,
			Time:              time.Minute,
			Timeout:           20 * time.Second,
		}),
		grpc.InTapHandle(recv.tap),
		grpc.ChainUnaryInterceptor(recv.received),
		grpc.ChainStreamInterceptor(recv.receivedStream),
	}, TransportOptions()...)
}

// TransportOptions are the options of the gRPC listener that decide what
// carrying a call costs: its codec, its pool of goroutines and its
// flow-control windows. The bench serves an empty handler on them, so
// that what sluice's service costs beyond it is the decision alone.
func TransportOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ForceServerCodecV2(newRLSCodec()),
		grpc.NumStreamWorkers(uint32(streamWorkersPerCPU * runtime.GOMAXPROCS(0))),
		grpc.InitialWindowSize(streamWindow),
		grpc.InitialConnWindowSize(connWindow),
	}
}

// streamWorkersPerCPU sizes the gRPC listener's pool of goroutines that
// run calls. Without a pool grpc-go starts a goroutine for every call,
// whose stack grows from 2 KiB to the 8 KiB a check needs by copying
// itself twice: 15% of a check's CPU on the memory store. A pooled
// goroutine keeps its stack from one call to the next; a call that finds
// every worker busy still gets a goroutine of its own. On 2 CPUs, 64 a
// CPU cost less per check than 4, 16, 128 and 256 (docs/performance.md).
const streamWorkersPerCPU = 64

// The flow-control windows of the gRPC listener: a check is a few hundred
// bytes, so these bound memory without slowing any real call.
const (
	streamWindow = 64 << 10
	connWindow   = 1 << 20
)

// errReceiveTimeout ends a call whose request did not arrive in time.
var errReceiveTimeout = status.Error(codes.DeadlineExceeded, "the request did not arrive within listeners.read_timeout")

// receiveWatch gives each gRPC call until its deadline to deliver its
// request: grpc-go starts a call's handler only once its request message
// is read, and a client that sends the headers and part of a message
// would otherwise hold the call's goroutine and buffers for as long as
// the connection lives. A call is watched from its headers (tap) until
// its request is decoded (arrived); every sweepEvery the watch cancels
// the calls past their deadline and forgets those that ended first. One
// map for every call rather than a timer each: a timer and its context
// hooks cost a call 2.4 µs and 15 allocations, this 1.3 µs and 6; a call
// whose own deadline comes first is not watched, and costs 0.05 µs and
// no allocation (BenchmarkReceiveWatch).
type receiveWatch struct {
	d       time.Duration
	refused func(reason string)
	mu      sync.Mutex
	calls   map[*receiving]struct{}
	once    sync.Once // starts the sweeping
	stopped sync.Once
	done    chan struct{}
}

// receiving is one call waiting for its request, and the call's context:
// its own cancellable one, which also finds the receiving (Value) without
// a context of its own.
type receiving struct {
	context.Context
	cancel context.CancelCauseFunc
	by     time.Time
}

type receivingKey struct{}

func (rc *receiving) Value(key any) any {
	if key == (receivingKey{}) {
		return rc
	}
	return rc.Context.Value(key)
}

// sweepEvery is how often the watch looks for calls past their deadline:
// a call is ended between its deadline and a second after it.
const sweepEvery = time.Second

func newReceiveWatch(d time.Duration, refused func(string)) *receiveWatch {
	return &receiveWatch{d: d, refused: refused, calls: map[*receiving]struct{}{}, done: make(chan struct{})}
}

// tap is the grpc.InTapHandle that starts watching a call. A call whose
// own deadline comes first is not watched: grpc-go ends it then, request
// or not. Envoy sends a deadline with every check, so its calls cost the
// watch nothing.
func (w *receiveWatch) tap(ctx context.Context, _ *tap.Info) (context.Context, error) {
	by := time.Now().Add(w.d)
	if own, ok := ctx.Deadline(); ok && !own.After(by) {
		return ctx, nil
	}
	w.once.Do(func() { go w.sweep() })
	ctx, cancel := context.WithCancelCause(ctx)
	rc := &receiving{Context: ctx, cancel: cancel, by: by}
	w.mu.Lock()
	w.calls[rc] = struct{}{}
	w.mu.Unlock()
	return rc, nil
}

// arrived stops watching the call of ctx: its request is here.
func (w *receiveWatch) arrived(ctx context.Context) {
	if rc, ok := ctx.Value(receivingKey{}).(*receiving); ok {
		w.mu.Lock()
		delete(w.calls, rc)
		w.mu.Unlock()
	}
}

func (w *receiveWatch) sweep() {
	t := time.NewTicker(sweepEvery)
	defer t.Stop()
	var late []*receiving
	for {
		select {
		case <-w.done:
			return
		case now := <-t.C:
			w.mu.Lock()
			for rc := range w.calls {
				switch {
				case rc.Err() != nil: // ended first (reset by its client)
					delete(w.calls, rc)
				case now.After(rc.by):
					delete(w.calls, rc)
					late = append(late, rc)
				}
			}
			w.mu.Unlock()
			for i, rc := range late {
				w.refused("receive_timeout")
				rc.cancel(errReceiveTimeout)
				late[i] = nil
			}
			late = late[:0]
		}
	}
}

// stop ends the sweeping, once the gRPC server has stopped; again, nothing.
func (w *receiveWatch) stop() { w.stopped.Do(func() { close(w.done) }) }

// received runs once a unary call's request is decoded.
func (w *receiveWatch) received(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	w.arrived(ctx)
	return h(ctx, req)
}

// receivedStream runs as a stream opens: a stream reads its messages
// itself, as long as it lives, so only its opening is watched.
func (w *receiveWatch) receivedStream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	w.arrived(ss.Context())
	return h(srv, ss)
}
