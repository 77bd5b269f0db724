// Package telemetry is what operators see of the server beside its logs:
// the backup jobs' metrics (JobMetrics, jobs.go) and OpenTelemetry
// tracing (this file): spans for every gRPC
// call (otelgrpc's stats handler) and every Postgres query (otelpgx),
// exported over OTLP/gRPC when an endpoint is configured, and off (a no-op
// provider, nothing exported, nothing recorded) by default.
package telemetry

import (
	"context"
	"fmt"

	"github.com/exaring/otelpgx"
	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Config says where spans go.
type Config struct {
	// Endpoint is the OTLP/gRPC collector (host:port); empty turns tracing
	// off.
	Endpoint string
	// Insecure sends to the collector without TLS (a sidecar on loopback).
	Insecure bool
	// SampleRatio is the fraction of new traces kept (calls that arrive
	// with a sampled parent follow it).
	SampleRatio float64
	Service     string
	Version     string
}

// Tracing is the tracer provider in force and what the server and the
// store hook into.
type Tracing struct {
	Provider   trace.TracerProvider
	Propagator propagation.TextMapPropagator
	shutdown   func(context.Context) error
}

// New starts tracing as cfg says; with no endpoint it is a no-op.
func New(ctx context.Context, cfg Config) (*Tracing, error) {
	prop := propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
	if cfg.Endpoint == "" {
		return &Tracing{Provider: noop.NewTracerProvider(), Propagator: prop, shutdown: func(context.Context) error { return nil }}, nil
	}
	opts := []otlptracegrpc.Option{otlptracegrpc.WithEndpoint(cfg.Endpoint)}
	if cfg.Insecure {
		opts = append(opts, otlptracegrpc.WithInsecure())
	}
	exp, err := otlptracegrpc.New(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("tracing: otlp exporter: %w", err)
	}
	return WithExporter(cfg, exp), nil
}

// WithExporter builds tracing over exp (New's OTLP exporter, or a test's).
func WithExporter(cfg Config, exp sdktrace.SpanExporter) *Tracing {
	ratio := cfg.SampleRatio
	if ratio <= 0 || ratio > 1 {
		ratio = 1
	}
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(ratio))),
		sdktrace.WithResource(resource.NewWithAttributes(semconv.SchemaURL,
			semconv.ServiceName(cfg.Service), semconv.ServiceVersion(cfg.Version))),
	)
	return &Tracing{
		Provider:   tp,
		Propagator: propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}),
		shutdown:   tp.Shutdown,
	}
}

// PgxTracer traces Postgres queries under this provider.
func (t *Tracing) PgxTracer() pgx.QueryTracer {
	return otelpgx.NewTracer(otelpgx.WithTracerProvider(t.Provider))
}

// Shutdown flushes spans not yet exported.
func (t *Tracing) Shutdown(ctx context.Context) error { return t.shutdown(ctx) }
