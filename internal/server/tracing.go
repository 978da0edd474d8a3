package server

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/guard"
	"github.com/sluicehq/sluice/internal/buildinfo"
)

// Tracing is OpenTelemetry's, configured by its standard variables alone:
// on when OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT
// is set (or OTEL_TRACES_EXPORTER=otlp), off when none is or when
// OTEL_SDK_DISABLED=true or OTEL_TRACES_EXPORTER=none; OTLP over
// http/protobuf (the default) or grpc, by OTEL_EXPORTER_OTLP_PROTOCOL or
// OTEL_EXPORTER_OTLP_TRACES_PROTOCOL; the exporters read the endpoint,
// headers and the rest themselves. Off, nothing is installed: no wrapper on
// any handler, one nil check per check.
type tracing struct {
	provider *sdktrace.TracerProvider
	tracer   trace.Tracer
}

// tracingOn reports whether the environment asks for traces.
func tracingOn() bool {
	if strings.EqualFold(os.Getenv("OTEL_SDK_DISABLED"), "true") {
		return false
	}
	switch strings.ToLower(os.Getenv("OTEL_TRACES_EXPORTER")) {
	case "none":
		return false
	case "otlp":
		return true
	}
	return os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// newTracing starts the SDK when the environment asks for it, else
// returns nil.
func newTracing(ctx context.Context) (*tracing, error) {
	if !tracingOn() {
		return nil, nil
	}
	protocol := os.Getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if protocol == "" {
		protocol = os.Getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	var exp *otlptrace.Exporter
	var err error
	switch protocol {
	case "", "http/protobuf":
		exp, err = otlptracehttp.New(ctx)
	case "grpc":
		exp, err = otlptracegrpc.New(ctx)
	default:
		return nil, fmt.Errorf("tracing: OTEL_EXPORTER_OTLP_PROTOCOL=%q: want http/protobuf or grpc", protocol)
	}
	if err != nil {
		return nil, fmt.Errorf("tracing: %w", err)
	}
	var batch []sdktrace.BatchSpanProcessorOption
	if os.Getenv("OTEL_BSP_SCHEDULE_DELAY") == "" {
		// A check's span is seen within a second or two, not the SDK's 5 s.
		batch = append(batch, sdktrace.WithBatchTimeout(time.Second))
	}
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(
		semconv.ServiceVersion(buildinfo.Read().Version)))
	if err != nil {
		res = resource.Default()
	}
	if os.Getenv("OTEL_SERVICE_NAME") == "" && !strings.Contains(os.Getenv("OTEL_RESOURCE_ATTRIBUTES"), "service.name=") {
		res, _ = resource.Merge(res, resource.NewSchemaless(semconv.ServiceName("sluice")))
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp, batch...), sdktrace.WithResource(res))
	return &tracing{provider: tp, tracer: tp.Tracer("github.com/sluicehq/sluice")}, nil
}

var propagator = propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})

// httpHandler wraps h to take W3C trace context from incoming requests.
func (t *tracing) httpHandler(h http.Handler) http.Handler {
	if t == nil {
		return h
	}
	return otelhttp.NewHandler(h, "sluice", otelhttp.WithTracerProvider(t.provider), otelhttp.WithPropagators(propagator))
}

// grpcOptions take W3C trace context from incoming calls.
func (t *tracing) grpcOptions() []grpc.ServerOption {
	if t == nil {
		return nil
	}
	return []grpc.ServerOption{grpc.StatsHandler(otelgrpc.NewServerHandler(
		otelgrpc.WithTracerProvider(t.provider), otelgrpc.WithPropagators(propagator)))}
}

// check starts a check's span.
func (t *tracing) check(ctx context.Context, label string, domain bool) (context.Context, trace.Span) {
	attr := attribute.String("sluice.policy", label)
	if domain {
		attr = attribute.String("sluice.domain", label)
	}
	return t.tracer.Start(ctx, "sluice.check", trace.WithAttributes(attr))
}

// shutdown flushes the spans not yet exported.
func (t *tracing) shutdown(ctx context.Context) {
	if t != nil {
		t.provider.Shutdown(ctx)
	}
}

// tracedStore gives every store call a span, a child of its check's.
type tracedStore struct {
	sluice.Store
	tracer trace.Tracer
}

func (s tracedStore) Take(ctx context.Context, req sluice.Request) (sluice.Decision, error) {
	ctx, span := s.tracer.Start(ctx, "sluice.store.take", trace.WithSpanKind(trace.SpanKindClient))
	d, err := s.Store.Take(ctx, req)
	end(span, err)
	return d, err
}

func (s tracedStore) TakeAll(ctx context.Context, reqs []sluice.Request, dst []sluice.Decision) error {
	ctx, span := s.tracer.Start(ctx, "sluice.store.take", trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.Int("sluice.requests", len(reqs))))
	err := s.Store.TakeAll(ctx, reqs, dst)
	end(span, err)
	return err
}

func end(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// InProcess passes on the wrapped store's: a Guard calls an in-process
// store without a timeout or breaker, traced or not.
func (s tracedStore) InProcess() bool {
	ip, ok := s.Store.(guard.InProcess)
	return ok && ip.InProcess()
}
