package postgres

import (
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/contentbackup/contentbackup/internal/store"
)

// TestCitusRelayedWorkerLossIsUnavailable: a worker's loss that Citus
// relays as an internal error (a COPY's, XX000) is an outage to retry,
// UNAVAILABLE, not a bug; a real internal error, or the duplicate key a
// COPY's fallback handles, stays what it is.
func TestCitusRelayedWorkerLossIsUnavailable(t *testing.T) {
	for msg, want := range map[string]bool{
		"terminating connection due to administrator command":                                                                               true,
		"connection to the remote node postgres@127.0.0.1:25434 failed with the following error: server closed the connection unexpectedly": true,
		"duplicate key value violates unique constraint \"messages_pkey_102065\"":                                                           false,
		"could not commit transaction for shard 102193 on at least one active node":                                                         true,
		"could not find shard": false,
	} {
		err := connLost(fmt.Errorf("postgres: append messages: %w", &pgconn.PgError{Code: "XX000", Message: msg}))
		if got := store.Unavailable(err); got != want {
			t.Errorf("%q: unavailable %v, want %v", msg, got, want)
		}
	}
	if err := connLost(&pgconn.PgError{Code: "23505", Message: "terminating connection due to administrator command"}); errors.Is(err, store.ErrUnavailable) {
		t.Errorf("a non-XX000 error was marked unavailable by its message")
	}
}
