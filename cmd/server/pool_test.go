package main

import (
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/contentbackup/contentbackup/internal/store/storetest"
)

// TestPoolFitsTheStreams (issue 52): with no pool_max_conns in
// --database-url, the PostgreSQL pool holds a connection for each archive
// stream and each job (which hold one as long as they stream) and the
// greater of 4 and the CPUs for the rest; pool_max_conns in the URL wins.
func TestPoolFitsTheStreams(t *testing.T) {
	db := storetest.NewPostgresDatabase(t)
	sep := "?"
	if strings.Contains(db, "?") {
		sep = "&"
	}
	for _, c := range []struct {
		url  string
		want int
	}{
		{db, 10 + 3 + max(4, runtime.NumCPU())},
		{db + sep + "pool_max_conns=7", 7},
	} {
		srv := serveIn(t, "LISTEN_ADDR=127.0.0.1:0", "METRICS_ADDR=", "LOG_FORMAT=json", "DATA_DIR="+t.TempDir(),
			"DATABASE_URL="+c.url, "MAX_ARCHIVE_STREAMS=10", "MAX_JOBS=3")
		if want := fmt.Sprintf(`"pool_max_conns":%d`, c.want); !strings.Contains(srv.logs(), want) {
			t.Errorf("%s: the store's log line does not say %s:\n%s", c.url, want, srv.logs())
		}
		srv.stop()
	}
}
