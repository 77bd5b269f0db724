package main

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/contentbackup/contentbackup/internal/history"
	"github.com/contentbackup/contentbackup/internal/jobs"
	"github.com/contentbackup/contentbackup/internal/store"
	"github.com/contentbackup/contentbackup/internal/telemetry"
)

// historyFlags configure the history server for XMTP device sync
// (docs/history-server.md).
type historyFlags struct {
	HistoryListen           string        `name:"history-listen" env:"HISTORY_LISTEN_ADDR" help:"Address to serve the device-sync history server on (POST /upload, GET /files/{id}); empty: off. With the gRPC listener's TLS when it has TLS; plaintext only on loopback or with --insecure."`
	HistoryBucket           string        `name:"history-bucket" env:"HISTORY_BUCKET" help:"gocloud.dev/blob URL of the bucket history files go to (file:///dir, s3://bucket?...). Default: file://<data-dir>/history."`
	HistoryMaxUpload        int64         `name:"history-max-upload" env:"HISTORY_MAX_UPLOAD" default:"104857600" help:"Largest history upload in bytes; past it 413, before anything is stored when the length is declared."`
	HistoryRetention        time.Duration `name:"history-retention" env:"HISTORY_RETENTION" default:"168h" help:"How long a history file is kept; the expiry worker deletes it after (404 from then on)."`
	HistoryMaxTotal         int64         `name:"history-max-total" env:"HISTORY_MAX_TOTAL" default:"0" help:"Bytes every history file may hold together; past it the oldest are evicted to make room (507 when none can be). 0: a quarter of a file bucket's disk, at most 10 GiB; 10 GiB for other buckets."`
	HistoryOneTime          bool          `name:"history-one-time" env:"HISTORY_ONE_TIME" help:"Delete a history file once it has been downloaded whole."`
	HistoryUploadsPerMinute float64       `name:"history-uploads-per-minute" env:"HISTORY_UPLOADS_PER_MINUTE" default:"6" help:"Uploads one client address may start a minute (after a burst of --history-upload-burst); past it 429."`
	HistoryUploadBurst      int           `name:"history-upload-burst" env:"HISTORY_UPLOAD_BURST" default:"6" help:"Uploads one client address may start at once before its rate applies."`
	HistoryUploadsPerClient int           `name:"history-uploads-per-client" env:"HISTORY_UPLOADS_PER_CLIENT" default:"2" help:"Uploads from one client address running at once; past it 429."`
	HistoryUploadsAtOnce    int           `name:"history-uploads-at-once" env:"HISTORY_UPLOADS_AT_ONCE" default:"16" help:"Uploads running at once from every client (each holds a 5 MiB buffer); past it 503."`
	HistoryCORSOrigins      []string      `name:"history-cors-origin" env:"HISTORY_CORS_ORIGINS" default:"*" help:"Origins browser SDKs may upload from (repeatable); * any, as the reference server. No credentials are ever allowed."`
}

// history opens the history server's bucket and service, or returns nil
// when it is off.
func (f historyFlags) history(ctx context.Context, dataDir string, diskReserve int64, st store.Store, reg prometheus.Registerer, log *zap.Logger) (*history.Service, func(), error) {
	if f.HistoryListen == "" {
		return nil, func() {}, nil
	}
	url := f.HistoryBucket
	if url == "" {
		abs, err := filepath.Abs(filepath.Join(dataDir, "history"))
		if err != nil {
			return nil, nil, err
		}
		url = "file://" + filepath.ToSlash(abs) + "?create_dir=1&no_tmp_dir=1&metadata=skip"
	}
	// jobs.Buckets opens it as the job buckets are, naming it and never
	// its URL (which may carry credentials) in errors.
	buckets := jobs.NewBuckets(map[string]string{"history": url})
	bucket, err := buckets.Open(ctx, "history")
	if err != nil {
		return nil, nil, fmt.Errorf("--history-bucket: %w", err)
	}
	cfg := history.Config{Store: st, Bucket: bucket, MaxUpload: f.HistoryMaxUpload, MaxTotal: f.HistoryMaxTotal,
		Retention: f.HistoryRetention, OneTime: f.HistoryOneTime, UploadsPerMinute: f.HistoryUploadsPerMinute,
		UploadBurst: f.HistoryUploadBurst, UploadsPerClient: f.HistoryUploadsPerClient, UploadsAtOnce: f.HistoryUploadsAtOnce,
		CORSOrigins: f.HistoryCORSOrigins, Log: log.Named("history"), Metrics: telemetry.HistoryMetrics(reg)}
	// A file bucket keeps --bucket-reserve free on its disk, as the job
	// buckets do: in the default layout it is the store's disk, which the
	// start log says.
	if dir := buckets.LocalDir("history"); dir != "" && cfg.MaxTotal <= 0 {
		// Anonymous callers fill this bucket: by default they get a
		// share of its disk, never a constant a small disk cannot hold
		// (issue 47, finding 1).
		size, err := jobs.DiskBytes(dir)
		if err != nil {
			return nil, nil, fmt.Errorf("--history-bucket: %w", err)
		}
		cfg.MaxTotal = min(int64(size/historyDiskShare), history.DefaultMaxTotal)
		log.Info("history files may hold a share of their disk together (--history-max-total)",
			zap.String("dir", dir), zap.Uint64("disk_bytes", size), zap.Int64("max_total_bytes", cfg.MaxTotal))
	}
	if dir := buckets.LocalDir("history"); dir != "" && diskReserve > 0 {
		cfg.FreeBytes = func() (uint64, error) { return jobs.FreeBytes(dir) }
		cfg.DiskReserve = diskReserve
		free, err := jobs.FreeBytes(dir)
		if err != nil {
			return nil, nil, fmt.Errorf("--history-bucket: %w", err)
		}
		log.Info("history files are stored on a local disk; uploads keep --bucket-reserve free on it",
			zap.String("dir", dir), zap.Bool("store_data_dir", f.HistoryBucket == ""), zap.Uint64("free_bytes", free), zap.Int64("reserve_bytes", diskReserve))
	}
	svc := history.New(cfg)
	return svc, func() { _ = buckets.Close() }, nil
}

// historyDiskShare: by default history files together hold at most one
// part in this many of a file bucket's disk.
const historyDiskShare = 4
