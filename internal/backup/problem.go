package backup

import (
	"errors"

	"github.com/contentbackup/contentbackup/internal/archive"
	"github.com/contentbackup/contentbackup/internal/fault"
	"github.com/contentbackup/contentbackup/internal/records"
)

// ArchiveProblem reports whether err is the archive's own fault rather
// than the server's or the store's, and names it: UNSUPPORTED_VERSION
// (ARCH-003), AUTHENTICATION_FAILED (a wrong key or altered bytes,
// ARCH-012), TRUNCATED (ARCH-018) or MALFORMED_ARCHIVE (a record that is
// not a valid element or exceeds a limit). Such an error is safe to show
// its caller: it speaks of records, never of the database. ArchiveService
// and the backup jobs both classify by it.
func ArchiveProblem(err error) (reason fault.Reason, ok bool) {
	var (
		ve *archive.VersionError
		fe *records.FieldError
	)
	switch {
	case errors.As(err, &ve):
		return fault.ReasonUnsupportedVersion, true
	case errors.Is(err, archive.ErrAuthentication):
		return fault.ReasonAuthenticationFailed, true
	case errors.Is(err, archive.ErrTruncated):
		return fault.ReasonTruncated, true
	case errors.Is(err, archive.ErrNotMetadata), errors.Is(err, archive.ErrRecordSize),
		errors.Is(err, archive.ErrCompression), errors.Is(err, archive.ErrElement), errors.As(err, &fe):
		return fault.ReasonMalformedArchive, true
	}
	return "", false
}
