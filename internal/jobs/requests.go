package jobs

import (
	"fmt"

	"google.golang.org/protobuf/proto"

	pv "github.com/contentbackup/contentbackup/api/contentbackup/persistence/v1"
	dsb "github.com/contentbackup/contentbackup/api/xmtp/device_sync"
	"github.com/contentbackup/contentbackup/internal/backup"
	"github.com/contentbackup/contentbackup/internal/store"
)

// ExportRequest is what an export job is asked to do.
type ExportRequest struct {
	Owner string
	// Bucket names a configured bucket; "" is the default one.
	Bucket string
	// Label is the operator's name for the backup (printable, at most
	// 128 bytes).
	Label   string
	Options *dsb.ArchiveOptions
	// Nonconforming is what the export does with a record the reference
	// would refuse.
	Nonconforming backup.Nonconforming
	// RequestID, when set, makes the start idempotent (AIP-155): a start
	// repeating it returns the job the first one started.
	RequestID string
	// Since, when set, is the catalog id of an earlier complete backup of
	// the owner: the export is an increment of it, holding only what was
	// written after its snapshot.
	Since string
	// From, when set, is the catalog id of a complete backup of the
	// owner: the export writes that backup's snapshot as a synthetic full
	// (synthesize.go) instead of reading the owner's records.
	From string
}

// ImportRequest is what an import job is asked to do: read a complete
// backup of SourceOwner (Owner when empty) into Owner.
type ImportRequest struct {
	Owner       string
	SourceOwner string
	Backup      string
	RequestID   string
	// ValidateOnly makes the job a dry run (AIP-163): it reads and
	// authenticates the whole backup and reports what the import would
	// do, applying nothing.
	ValidateOnly bool
	// Replace makes the import a point-in-time restore
	// (backup.Replace): the owner's exportable records become the
	// backup's snapshot, what the snapshot lacks deleted.
	Replace bool
}

var nonconformingRows = map[backup.Nonconforming]pv.NonconformingRecords{
	backup.FailNonconforming:    pv.NonconformingRecords_NONCONFORMING_RECORDS_FAIL,
	backup.ExcludeNonconforming: pv.NonconformingRecords_NONCONFORMING_RECORDS_EXCLUDE,
	backup.RepairNonconforming:  pv.NonconformingRecords_NONCONFORMING_RECORDS_REPAIR,
}

var importModes = map[bool]pv.ImportMode{false: pv.ImportMode_IMPORT_MODE_MERGE, true: pv.ImportMode_IMPORT_MODE_REPLACE}

// spec is the job row's spec column for req.
func (req ExportRequest) spec() ([]byte, error) {
	return proto.Marshal(&pv.ExportSpec{Owner: req.Owner, Options: req.Options, Bucket: req.Bucket, Label: req.Label,
		Nonconforming: nonconformingRows[req.Nonconforming], RequestId: req.RequestID, SinceBackup: req.Since, FromBackup: req.From})
}

func (req ImportRequest) spec() ([]byte, error) {
	return proto.Marshal(&pv.ImportSpec{Owner: req.Owner, Backup: req.Backup, SourceOwner: req.SourceOwner, RequestId: req.RequestID,
		ValidateOnly: req.ValidateOnly, Mode: importModes[req.Replace]})
}

// Progress is job j's last recorded progress.
func Progress(j store.Job) (*pv.JobProgress, error) {
	p := &pv.JobProgress{}
	if err := proto.Unmarshal(j.Progress, p); err != nil {
		return nil, fmt.Errorf("job %s: progress: %w", j.ID, err)
	}
	if j.State != store.JobRunning {
		p.Phase = pv.JobPhase_JOB_PHASE_DONE
	}
	return p, nil
}
