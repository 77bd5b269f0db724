package main

import (
	"strconv"
	"time"

	"github.com/alecthomas/kong"

	"github.com/contentbackup/contentbackup/internal/jobs"
	"github.com/contentbackup/contentbackup/internal/server"
)

// flagDefaults are the defaults of the flags whose package owns one, as
// the kong variables their tags name (default:"${memory_budget}"): each
// written once, in its package (server.DefaultLimits,
// jobs.DefaultConfig), so --help, the README's table and a server started
// with no flags all say the same.
func flagDefaults() kong.Vars {
	l, j := server.DefaultLimits, jobs.DefaultConfig
	i := func(n int64) string { return strconv.FormatInt(n, 10) }
	d := func(t time.Duration) string { return t.String() }
	return kong.Vars{
		"memory_budget":                 i(l.MemoryBytes),
		"list_page_bytes":               i(int64(l.ListPageBytes)),
		"max_group_bytes":               i(int64(l.Records.GroupBytes)),
		"max_message_bytes":             i(int64(l.Records.MessageContentBytes)),
		"max_consent_bytes":             i(int64(l.Records.ConsentBytes)),
		"import_read_ahead":             i(l.ImportReadAheadBytes),
		"archive_max_window":            i(int64(l.ArchiveWindowBytes)),
		"max_archive_streams":           i(int64(l.MaxArchiveStreams)),
		"max_archive_streams_per_owner": i(int64(l.MaxArchiveStreamsPerOwner)),
		"max_message_streams":           i(int64(l.MaxMessageStreams)),
		"max_message_streams_per_owner": i(int64(l.MaxMessageStreamsPerOwner)),
		"stream_idle_timeout":           d(l.StreamIdleTimeout),
		"max_connection_age":            d(l.MaxConnectionAge),
		"max_connection_age_grace":      d(l.MaxConnectionAgeGrace),
		"max_jobs":                      i(int64(j.MaxRunning)),
		"max_jobs_per_owner":            i(int64(max(j.MaxRunning/2, 1))),
		"max_queued_jobs_per_owner":     i(int64(j.MaxQueuedPerOwner)),
		"keep_finished_jobs":            d(j.KeepFinished),
		"job_lease":                     d(j.Lease),
		"owner_backup_quota":            i(j.OwnerQuota),
		"bucket_reserve":                i(j.BucketReserve),
		"job_attempts":                  i(int64(j.MaxAttempts)),
	}
}

// parserOptions are the kong options every parse of the command line
// takes, the binary's and the tests': sections, variables (the version
// and the packages' defaults) and the config file's loader.
func parserOptions() []kong.Option {
	vars := flagDefaults()
	vars["version"] = version()
	return []kong.Option{
		kong.Name("server"),
		kong.Description("The contentbackup gRPC service: XMTP content encode/decode and conversation backups."),
		vars, helpGroups,
	}
}
