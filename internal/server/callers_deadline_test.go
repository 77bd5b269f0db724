package server

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	cb "github.com/contentbackup/contentbackup/api/contentbackup/v1"
	mb "github.com/contentbackup/contentbackup/api/xmtp/device_sync/message_backup"
	"github.com/contentbackup/contentbackup/internal/store/enginetest"
	"github.com/contentbackup/contentbackup/internal/store/postgres"
	"github.com/contentbackup/contentbackup/internal/store/storetest"
	"github.com/contentbackup/contentbackup/internal/transport"
)

// TestCallersDeadlineIsTheCallers (issue 52): on PostgreSQL, calls whose
// deadline passes inside a store query are the caller's: answered,
// logged and counted as DEADLINE_EXCEEDED, never as the store
// unavailable or an internal error; and they cost no database session,
// since the query is cancelled on the server and its connection kept
// (the pool grows at most to its size, whatever the number of calls).
// Before, pgx closed the connection of every cancelled query, and the
// edge counted "use of closed network connection" as UNAVAILABLE.
func TestCallersDeadlineIsTheCallers(t *testing.T) {
	st := enginetest.Postgres(t).(*postgres.Store)
	reg := prometheus.NewRegistry()
	addr := serveTCP(t, Config{Store: st, Metrics: reg, MaxAppendBatch: 20000}, nil)
	conn := dial(t, addr, transport.ClientOptions{Insecure: true, Token: testAdminToken})
	c := cb.NewConversationServiceClient(conn)
	owner := "alice"
	put(t, c, owner, storetest.FullGroup("g"))
	batch := func(round int) []*mb.GroupMessageSave {
		msgs := make([]*mb.GroupMessageSave, 5000)
		for i := range msgs {
			msgs[i] = storetest.Message(fmt.Sprintf("r%d-m%d", round, i), storetest.GroupID("g"), int64(i+1))
		}
		return msgs
	}
	// Warm the pool: the sessions a first call opens are not the cost of
	// cancelling. Its time sets the deadlines below, so that they fall
	// inside the store's work on a fast machine and a loaded one alike
	// (fixed ones of 15-60 ms expired in the client's own marshalling
	// under -race on a busy CI machine, and the server saw no call).
	start := time.Now()
	if _, err := c.AppendMessages(t.Context(), &cb.AppendMessagesRequest{Owner: owner, Messages: batch(-1)}); err != nil {
		t.Fatal(err)
	}
	whole := time.Since(start)
	before := st.Pool().Stat().NewConnsCount()
	const calls = 60
	expired := 0
	for round := range calls {
		// Long enough for the request to reach the store, short enough
		// for its statements to outlast it: 40% to 94% of a whole call.
		ctx, cancel := context.WithTimeout(t.Context(), whole*time.Duration(40+round%10*6)/100)
		_, err := c.AppendMessages(ctx, &cb.AppendMessagesRequest{Owner: owner, Messages: batch(round)})
		cancel()
		if err != nil {
			expired++
		}
	}
	// The server sees the end of each call a moment after its client.
	time.Sleep(200 * time.Millisecond)
	if expired == 0 {
		t.Fatal("no call's deadline passed: the test cut nothing short")
	}
	handled := map[string]float64{}
	for _, code := range []string{"OK", "Canceled", "DeadlineExceeded", "Unavailable", "Internal", "Unknown", "Aborted"} {
		handled[code] = series(t, reg, "grpc_server_handled_total", map[string]string{"grpc_method": "AppendMessages", "grpc_code": code}).GetCounter().GetValue()
	}
	for _, blamed := range []string{"Unavailable", "Internal", "Unknown", "Aborted"} {
		if handled[blamed] != 0 {
			t.Errorf("%v calls cut short by their own deadline were counted %s: %v", handled[blamed], blamed, handled)
		}
	}
	// The client's deadline cancels its call (CANCELLED) or the server's
	// copy of it passes first (DEADLINE_EXCEEDED): both are the caller's.
	if handled["DeadlineExceeded"]+handled["Canceled"] == 0 {
		t.Errorf("no call was counted as the caller's: %v", handled)
	}
	opened := st.Pool().Stat().NewConnsCount() - before
	t.Logf("%d of %d calls cut short by their deadline; the server counted %v; %d new database sessions", expired, calls, handled, opened)
	// A cancelled query's connection waits a moment before it serves
	// again (the cancel request must not reach the next statement), so
	// the pool may grow to its size, and a server slow to confirm a cancel
	// costs its connection; closing every cancelled query's connection
	// (pgx's default) opened one session for every two calls here.
	if opened*5 > int64(expired) {
		t.Errorf("%d calls cut short opened %d database sessions: cancelled queries close their connections", expired, opened)
	}
}

// TestStreamsCutMidwayKeepTheirSessions (issue 52): on PostgreSQL, 1,000
// streams whose callers hang up after the first response (StreamMessages
// of a large group and Export, half each), their queries still running,
// open no more than a handful of database sessions: each cancelled query
// is cancelled on the server and its connection kept.
func TestStreamsCutMidwayKeepTheirSessions(t *testing.T) {
	st := enginetest.Postgres(t).(*postgres.Store)
	addr := serveTCP(t, Config{Store: st, MaxAppendBatch: 20000, Limits: Limits{MaxMessageStreamsPerOwner: 1000, MaxArchiveStreamsPerOwner: 1000}}, nil)
	conn := dial(t, addr, transport.ClientOptions{Insecure: true, Token: testAdminToken})
	c := cb.NewConversationServiceClient(conn)
	arch := cb.NewArchiveServiceClient(conn)
	owner := "alice"
	g := storetest.FullGroup("g")
	put(t, c, owner, g)
	if _, err := c.AppendMessages(t.Context(), &cb.AppendMessagesRequest{Owner: owner, Messages: storetest.Messages("m", g.GetId(), 20000, 1)}); err != nil {
		t.Fatal(err)
	}
	key := make([]byte, 32)
	cut := func(i int) error {
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		if i%2 == 0 {
			s, err := c.StreamMessages(ctx, &cb.StreamMessagesRequest{Owner: owner, GroupId: g.GetId(), PageSize: 1000})
			if err != nil {
				return err
			}
			_, err = s.Recv()
			return err
		}
		s, err := arch.Export(ctx, &cb.ExportRequest{Owner: owner, Key: key})
		if err != nil {
			return err
		}
		_, err = s.Recv()
		return err
	}
	// Warm the pool: the sessions the first streams open are not the
	// cost of cutting them.
	for i := range 4 {
		if err := cut(i); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(200 * time.Millisecond)
	before := st.Pool().Stat().NewConnsCount()
	const streams = 1000
	for i := range streams {
		if err := cut(i); err != nil {
			t.Fatalf("stream %d: %v", i, err)
		}
	}
	time.Sleep(200 * time.Millisecond)
	opened := st.Pool().Stat().NewConnsCount() - before
	t.Logf("%d streams cut after their first response opened %d database sessions (pool of %d)", streams, opened, st.Pool().Config().MaxConns)
	if opened > 5 {
		t.Errorf("%d streams cut midway opened %d database sessions: cancelled queries close their connections", streams, opened)
	}
}
