package fault

import "errors"

// Reason says why a call or a job failed, for programs: the API's
// contentbackup.v1.ErrorReason, a value's name without its ERROR_REASON_
// prefix. The edge attaches it to every status as a google.rpc.ErrorInfo;
// a test there holds this list and the API's enum equal, as
// TestFaultKindsAreCodes holds kinds and codes.
type Reason string

// The reasons, declared in the API (api/contentbackup/v1/error_reason.proto).
const (
	ReasonUnauthenticated       Reason = "UNAUTHENTICATED"
	ReasonScopeMissing          Reason = "SCOPE_MISSING"
	ReasonOwnerNotPermitted     Reason = "OWNER_NOT_PERMITTED"
	ReasonActorNotPermitted     Reason = "ACTOR_NOT_PERMITTED"
	ReasonMethodNotOpen         Reason = "METHOD_NOT_OPEN"
	ReasonInvalidArgument       Reason = "INVALID_ARGUMENT"
	ReasonBudgetExceeded        Reason = "BUDGET_EXCEEDED"
	ReasonDigestMismatch        Reason = "DIGEST_MISMATCH"
	ReasonAuthenticationFailed  Reason = "AUTHENTICATION_FAILED"
	ReasonNotDeletable          Reason = "NOT_DELETABLE"
	ReasonNotSenderOrSuperAdmin Reason = "NOT_SENDER_OR_SUPER_ADMIN"
	ReasonUnsupportedVersion    Reason = "UNSUPPORTED_VERSION"
	ReasonTruncated             Reason = "TRUNCATED"
	ReasonMalformedArchive      Reason = "MALFORMED_ARCHIVE"
	ReasonMissingGroup          Reason = "MISSING_GROUP"
	ReasonNotFound              Reason = "NOT_FOUND"
	ReasonBackupNotFound        Reason = "BACKUP_NOT_FOUND"
	ReasonBackupNotComplete     Reason = "BACKUP_NOT_COMPLETE"
	ReasonBackupDamaged         Reason = "BACKUP_DAMAGED"
	ReasonKeyUnavailable        Reason = "KEY_UNAVAILABLE"
	ReasonAlreadyExists         Reason = "ALREADY_EXISTS"
	ReasonHeld                  Reason = "HELD"
	ReasonOwnerErasing          Reason = "OWNER_ERASING"
	ReasonFailedPrecondition    Reason = "FAILED_PRECONDITION"
	ReasonResourceExhausted     Reason = "RESOURCE_EXHAUSTED"
	ReasonQueueFull             Reason = "QUEUE_FULL"
	ReasonStoreFull             Reason = "STORE_FULL"
	ReasonBucketFull            Reason = "BUCKET_FULL"
	ReasonStoreUnavailable      Reason = "STORE_UNAVAILABLE"
	ReasonStoreFailed           Reason = "STORE_FAILED"
	ReasonStorageRefused        Reason = "STORAGE_REFUSED"
	ReasonUnavailable           Reason = "UNAVAILABLE"
	ReasonAborted               Reason = "ABORTED"
	ReasonAttemptLost           Reason = "ATTEMPT_LOST"
	ReasonCancelled             Reason = "CANCELLED"
	ReasonDeadlineExceeded      Reason = "DEADLINE_EXCEEDED"
	ReasonPermissionDenied      Reason = "PERMISSION_DENIED"
	ReasonInternal              Reason = "INTERNAL"
	ReasonOwnerQuota            Reason = "OWNER_QUOTA"
)

// Reasons is every reason, in the API's order.
var Reasons = []Reason{
	ReasonUnauthenticated,
	ReasonScopeMissing,
	ReasonOwnerNotPermitted,
	ReasonActorNotPermitted,
	ReasonMethodNotOpen,
	ReasonInvalidArgument,
	ReasonBudgetExceeded,
	ReasonDigestMismatch,
	ReasonAuthenticationFailed,
	ReasonNotDeletable,
	ReasonNotSenderOrSuperAdmin,
	ReasonUnsupportedVersion,
	ReasonTruncated,
	ReasonMalformedArchive,
	ReasonMissingGroup,
	ReasonNotFound,
	ReasonBackupNotFound,
	ReasonBackupNotComplete,
	ReasonBackupDamaged,
	ReasonKeyUnavailable,
	ReasonAlreadyExists,
	ReasonHeld,
	ReasonOwnerErasing,
	ReasonFailedPrecondition,
	ReasonResourceExhausted,
	ReasonQueueFull,
	ReasonStoreFull,
	ReasonBucketFull,
	ReasonStoreUnavailable,
	ReasonStoreFailed,
	ReasonStorageRefused,
	ReasonUnavailable,
	ReasonAborted,
	ReasonAttemptLost,
	ReasonCancelled,
	ReasonDeadlineExceeded,
	ReasonPermissionDenied,
	ReasonInternal,
	ReasonOwnerQuota,
}

// Reasoned is an error that knows its reason.
type Reasoned interface {
	error
	FaultReason() Reason
}

type reasonedSentinel struct {
	sentinel
	reason Reason
}

func (e *reasonedSentinel) FaultReason() Reason { return e.reason }

// NewReason is a sentinel error of kind k and reason r, to compare with
// errors.Is.
func NewReason(k Kind, r Reason, msg string) error {
	return &reasonedSentinel{sentinel: sentinel{kind: k, msg: msg}, reason: r}
}

// kindReasons is the reason of an error that names none: its kind's.
var kindReasons = map[Kind]Reason{
	Canceled: ReasonCancelled, Invalid: ReasonInvalidArgument, DeadlineExceeded: ReasonDeadlineExceeded,
	NotFound: ReasonNotFound, AlreadyExists: ReasonAlreadyExists, PermissionDenied: ReasonPermissionDenied,
	Exhausted: ReasonResourceExhausted, FailedPrecondition: ReasonFailedPrecondition, Aborted: ReasonAborted,
	Internal: ReasonInternal, Unavailable: ReasonUnavailable,
}

// ReasonOf is err's reason: that of the outermost error in its chain that
// has one, else that of its kind k (what Of said of it).
func ReasonOf(err error, k Kind) Reason {
	var r Reasoned
	if errors.As(err, &r) {
		return r.FaultReason()
	}
	return KindReason(k)
}

// KindReason is the reason of kind k, for an error that names none.
func KindReason(k Kind) Reason {
	if r, ok := kindReasons[k]; ok {
		return r
	}
	return ReasonInternal
}
