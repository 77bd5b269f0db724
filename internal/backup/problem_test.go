package backup

import (
	"errors"
	"fmt"
	"testing"

	"github.com/contentbackup/contentbackup/internal/archive"
	"github.com/contentbackup/contentbackup/internal/records"
)

// TestArchiveProblem: the archive's own faults are named, wrapped as the
// reader and import wrap them; a failing source, the store and a missing
// group are not the archive's fault.
func TestArchiveProblem(t *testing.T) {
	record := func(err error) error { return &archive.RecordError{Record: 3, Err: err} }
	for _, tc := range []struct {
		err    error
		reason string
	}{
		{&archive.VersionError{Version: 9}, "UNSUPPORTED_VERSION"},
		{record(archive.ErrAuthentication), "AUTHENTICATION_FAILED"},
		{record(fmt.Errorf("%w: cut", archive.ErrTruncated)), "TRUNCATED"},
		{record(archive.ErrNotMetadata), "MALFORMED_ARCHIVE"},
		{record(archive.ErrRecordSize), "MALFORMED_ARCHIVE"},
		{record(archive.ErrCompression), "MALFORMED_ARCHIVE"},
		{record(archive.ErrElement), "MALFORMED_ARCHIVE"},
		{&ImportError{Record: 4, Err: &records.FieldError{Field: "id", Reason: "empty"}}, "MALFORMED_ARCHIVE"},
		{record(fmt.Errorf("%w inside a block: connection reset", archive.ErrSource)), ""},
		{&ImportError{Record: 5, Err: ErrMissingGroup}, ""},
		{errors.New("database is down"), ""},
	} {
		reason, ok := ArchiveProblem(tc.err)
		if string(reason) != tc.reason || ok != (tc.reason != "") {
			t.Errorf("%v: %q %v, want %q", tc.err, reason, ok, tc.reason)
		}
	}
}
