// Package jobstest gives tests outside package jobs a jobs configuration
// over temporary directories, as cmd/server builds one from its flags.
package jobstest

import (
	"testing"

	"github.com/contentbackup/contentbackup/internal/jobs"
	"github.com/contentbackup/contentbackup/internal/keyring"
)

// Local is a jobs configuration over t's temporary directories: a local
// key-encryption key and the file bucket "local", whose directory is dir;
// both are closed when t ends.
func Local(t testing.TB) (cfg jobs.Config, dir string) {
	t.Helper()
	kek, err := keyring.Open(t.Context(), "", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { kek.Close() })
	dir = t.TempDir()
	buckets := jobs.NewBuckets(map[string]string{"local": "file://" + dir + "?no_tmp_dir=1&metadata=skip"})
	t.Cleanup(func() { buckets.Close() })
	return jobs.Config{KEK: kek, Buckets: buckets}, dir
}
