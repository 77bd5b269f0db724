package jobs

import (
	"context"
	"errors"
	"syscall"

	"go.uber.org/zap"
	"gocloud.dev/gcerrors"

	"github.com/contentbackup/contentbackup/internal/fault"
	"github.com/contentbackup/contentbackup/internal/keyring"
	"github.com/contentbackup/contentbackup/internal/store"
)

// describe turns a job's error into the code and message its operation
// shows: the cause of a cancellation, or the error's kind (fault.Of, the
// vocabulary RPCs are classified by too). Permanent failures (a damaged
// backup, a bad archive, a budget) say so; transient ones (store or
// storage unavailable) say to start again. Kinds that name the server's
// own trouble show a generic message (the server log has the cause), as
// RPCs do. The code is the kind: fault's kinds are google.rpc.Code's.
func (rn *Runner) describe(ctx context.Context, kind string, validateOnly bool, err error, log *zap.Logger) failure {
	ended := func(what string) string {
		if k, ok := rn.kinds[kind]; ok {
			return what + k.leftBehind(validateOnly)
		}
		return what + "; nothing was committed"
	}
	switch cause := context.Cause(ctx); {
	case errors.Is(cause, errCancelled):
		return failure{fault.Canceled, fault.ReasonCancelled, ended("cancelled")}
	case errors.Is(cause, errShutdown):
		return failure{fault.Unavailable, fault.ReasonUnavailable, ended(errShutdown.Error())}
	case errors.Is(cause, errLost):
		return failure{fault.Aborted, fault.ReasonAttemptLost, ended(errLost.Error())}
	}
	var full *store.FullError
	k := fault.Of(err, fault.FileKind, store.UnavailableKind, storageKind)
	switch {
	case errors.As(err, &full):
		log.Error("job failed: store out of space", zap.Error(err))
		return failure{k, fault.ReasonStoreFull, ended("the store (" + full.Engine + ") is out of space")}
	case errors.Is(err, ErrObjectExists):
		return failure{k, fault.ReasonAlreadyExists, clip(err.Error())}
	case errors.Is(err, ErrKeyUnavailable), errors.Is(err, keyring.ErrNoKEK):
		log.Error("job failed: key-encryption key unavailable", zap.Error(err))
		return failure{k, fault.ReasonKeyUnavailable, ended("the key-encryption key that wrapped the backup is not available to this server (see its log)")}
	case errors.Is(err, ErrBackupDamaged), errors.Is(err, keyring.ErrUnwrap):
		log.Error("job failed: backup damaged", zap.Error(err))
		return failure{k, fault.ReasonBackupDamaged, ended("the backup's object or key does not match the catalog; it cannot be read")}
	case gcerrors.Code(err) == gcerrors.NotFound:
		// The source was deleted while it was read: starting again does
		// not help.
		log.Warn("job failed: object gone", zap.Error(err))
		if kind == store.JobImport {
			return failure{k, fault.ReasonStorageRefused, "the backup's object is gone from its bucket (deleted while it was read); the records applied so far stay"}
		}
		return failure{k, fault.ReasonStorageRefused, ended("an object the export wrote is gone from its bucket")}
	case k == fault.Exhausted && (gcerrors.Code(err) == gcerrors.ResourceExhausted || errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)):
		log.Error("job failed: bucket out of space", zap.Error(err))
		return failure{k, fault.ReasonBucketFull, ended("the bucket is out of space or over its quota")}
	case k == fault.FailedPrecondition && gcerrors.Code(err) != gcerrors.Unknown:
		log.Warn("job failed: storage refused", zap.Error(err))
		return failure{k, fault.ReasonStorageRefused, ended("object storage refused the server: " + gcerrors.Code(err).String() + " (see the server log)")}
	}
	switch k {
	case fault.Exhausted, fault.FailedPrecondition, fault.Invalid:
		// A budget, the record or the archive at fault, named by record:
		// safe to show, as the RPCs show it.
		return failure{k, fault.ReasonOf(err, k), ended(clip(err.Error()))}
	case fault.Unavailable, fault.Canceled, fault.DeadlineExceeded:
		// A context error that is not the job's own cancellation came
		// from storage's calls: storage failed, for the job.
		if store.Unavailable(err) {
			log.Warn("job failed: store unavailable", zap.Error(err))
			return failure{k, fault.ReasonStoreUnavailable, ended("the store is unavailable")}
		}
		log.Warn("job failed: storage", zap.Error(err))
		return failure{k, fault.ReasonUnavailable, ended("object storage refused or failed: " + gcerrors.Code(err).String())}
	}
	log.Error("job failed", zap.Error(err))
	return failure{fault.Internal, fault.ReasonInternal, ended("internal error")}
}

// failure is how a job failed, as its end records it: its code (a kind is
// a google.rpc.Code), its reason and its message.
type failure struct {
	kind   fault.Kind
	reason fault.Reason
	msg    string
}

// storageKind classifies object storage's errors, which carry gocloud's
// codes rather than a kind: an object that is gone (a backup deleted
// while it was read) or a bucket that refuses the server is the state's
// fault, FailedPrecondition; a full bucket or quota is Exhausted; only
// storage that cannot be reached, or fails, is Unavailable.
func storageKind(err error) (fault.Kind, bool) {
	switch gcerrors.Code(err) {
	case gcerrors.Unknown, gcerrors.OK:
		return 0, false
	case gcerrors.NotFound, gcerrors.PermissionDenied, gcerrors.FailedPrecondition:
		return fault.FailedPrecondition, true
	case gcerrors.ResourceExhausted:
		return fault.Exhausted, true
	}
	return fault.Unavailable, true
}

// clip bounds a message at 512 bytes, cut on a character boundary.
func clip(s string) string { return fault.Clip(s, 512, "...") }
