package backup

import (
	"errors"
	"fmt"
	"io"

	ds "github.com/contentbackup/contentbackup/api/xmtp/device_sync"
	"github.com/contentbackup/contentbackup/internal/archive"
	"github.com/contentbackup/contentbackup/internal/records"
)

// Report is what reading a whole archive found, applying nothing.
type Report struct {
	Version  uint16
	Metadata *ds.BackupMetadataSave
	// Record0Legacy: record 0 opened only under the legacy retry.
	Record0Legacy bool
	// Records read, the metadata included; per kind; skipped (ARCH-005);
	// legacy (opened under the ARCH-002 retry).
	Records, Groups, Messages, Consent, Skipped, Legacy uint64
	// Err is the first problem, a *archive.RecordError naming its record
	// when it is in one; nil when the archive is complete.
	Err error
}

// Verify reads an archive to its end without applying anything. Only a
// key of the wrong length (archive.ErrKeySize) is returned as an error;
// what is wrong with the archive is in the report.
// opts are the reader's limits and meter (the zero value: the defaults).
func Verify(r io.Reader, key []byte, opts archive.ReaderOptions) (rep Report, err error) {
	ar, err := archive.NewReader(r, key, opts)
	if errors.Is(err, archive.ErrKeySize) {
		return rep, err
	}
	// A later version is refused before any record (ARCH-003), but the
	// header was read: report the version it holds.
	var ve *archive.VersionError
	if errors.As(err, &ve) {
		rep.Version = ve.Version
	}
	if err != nil {
		rep.Err = err
		return rep, nil
	}
	defer ar.Close()
	rep.Version = ar.Version()
	defer func() {
		st := ar.Stats()
		rep.Records, rep.Skipped, rep.Legacy, rep.Record0Legacy = st.Records, st.Skipped, st.Legacy, st.Record0Legacy
	}()
	if rep.Metadata, rep.Err = ar.Metadata(); rep.Err != nil {
		return rep, nil
	}
	for {
		el, err := ar.NextShared()
		if errors.Is(err, io.EOF) {
			return rep, nil
		}
		if err != nil {
			rep.Err = err
			return rep, nil
		}
		// A record import would refuse (and the reference's importer with
		// it) is the archive's problem, reported by number.
		var bad error
		switch e := el.GetElement().(type) {
		case *ds.BackupElement_Group:
			rep.Groups++
			bad = records.At("group", records.CheckArchivedGroup(e.Group))
		case *ds.BackupElement_GroupMessage:
			rep.Messages++
			bad = records.At("group_message", records.PrepareMessage(e.GroupMessage))
		case *ds.BackupElement_Consent:
			rep.Consent++
			bad = records.At("consent", records.CheckConsent(e.Consent))
		}
		if bad != nil {
			rep.Err = &archive.RecordError{Record: ar.Record(), Err: fmt.Errorf("import would refuse it: %w", bad)}
			return rep, nil
		}
	}
}
