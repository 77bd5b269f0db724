package postgres

import (
	"bufio"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/jackc/pgx/v5/pgxpool"
)

// cancelGrace is how long a cancelled statement's connection waits for
// the server to confirm the cancel before it is closed instead: short, so
// that a server that went away (a failover) costs a cancelled call no
// more than a second.
const cancelGrace = time.Second

// poolConfig is the pool Open connects with: url's settings, and how the
// pool's connections read, trace and stop their statements.
func poolConfig(url string, opts Options) (*pgxpool.Config, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("postgres: database url: %w", err)
	}
	if opts.Tracer != nil {
		cfg.ConnConfig.Tracer = opts.Tracer
	}
	if opts.OnNotice != nil {
		cfg.ConnConfig.OnNotice = opts.OnNotice
	}
	if opts.MaxConns > 0 && !strings.Contains(url, "pool_max_conns") {
		cfg.MaxConns = opts.MaxConns
	}
	// pgx reads the server's messages 8 KiB at a time: an export's stream
	// of rows took a read system call per 8 KiB, a fifth of the server's
	// CPU where system calls are dear. A 256 KiB buffer under it makes one
	// of thirty-two, for one copy more of each byte.
	cfg.ConnConfig.BuildFrontend = func(r io.Reader, w io.Writer) *pgproto3.Frontend {
		return pgproto3.NewFrontend(bufio.NewReaderSize(r, 256<<10), w)
	}
	// A caller that hangs up, or whose deadline passes, mid-query costs no
	// connection: pgx's default closes the connection to stop the query
	// (a new session for every cancelled call); this one asks the server
	// to cancel the statement and keeps the connection, closing it only
	// when the server has not answered the cancel within cancelGrace.
	cfg.ConnConfig.BuildContextWatcherHandler = func(c *pgconn.PgConn) ctxwatch.Handler {
		return &pgconn.CancelRequestContextWatcherHandler{Conn: c, DeadlineDelay: cancelGrace}
	}
	return cfg, nil
}
