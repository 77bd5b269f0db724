// Package store holds every owner's groups, messages and consent records.
//
// Store is the one interface the services depend on; engines implement it
// (internal/store/postgres for production, internal/store/sqlite as the
// embedded default), building on the SQL they share
// (internal/store/internal/sqlstore), and internal/store/storetest holds
// the conformance suite every engine passes. Records are the archive format's own messages
// (GroupSave, GroupMessageSave, ConsentSave), stored field for field, so a
// record read back is proto.Equal to the record written.
//
// Every method takes the owner first: the inbox whose store it acts on.
// The owner leads every key, so nothing is ever read or written across
// owners, and another owner's record is indistinguishable from a missing
// one.
//
// The store keeps records; it does not validate requests (the service
// layer does) and applies only the rules that need its atomicity: the
// group checks of an append, the merge rules of consent and of import,
// and the conditional delete.
package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"google.golang.org/protobuf/proto"

	cs "github.com/contentbackup/contentbackup/api/xmtp/device_sync/consent_backup"
	gb "github.com/contentbackup/contentbackup/api/xmtp/device_sync/group_backup"
	mb "github.com/contentbackup/contentbackup/api/xmtp/device_sync/message_backup"
	"github.com/contentbackup/contentbackup/internal/fault"
	"github.com/contentbackup/contentbackup/internal/records"
)

// Errors callers tell apart with errors.Is. The wrapping error names the
// record concerned.
var (
	// ErrNotFound: the owner has no such group or message.
	ErrNotFound = fault.New(fault.NotFound, "not found")
	// ErrGroupInactive: the group is Restored, so it takes no new messages
	// (ARCH-015) and cannot be put over until activated.
	ErrGroupInactive = fault.New(fault.FailedPrecondition, "group is restored from an archive and inactive until a validated welcome activates it")
	// ErrFailedPrecondition: the record's state forbids the operation.
	ErrFailedPrecondition = fault.New(fault.FailedPrecondition, "failed precondition")
	// ErrUnavailable: the database cannot be reached or is shutting down;
	// the same call may succeed later.
	ErrUnavailable = fault.NewReason(fault.Unavailable, fault.ReasonStoreUnavailable, "the store is unavailable")
)

// FullError: the engine ran out of space (disk full, or SQLite's page
// limit). The write was refused whole: its transaction rolled back, so
// nothing of it was stored. Writes succeed again once space is freed.
type FullError struct {
	// Engine names the store: "sqlite" or "postgres".
	Engine string
	Err    error
}

func (e *FullError) Error() string {
	return e.Engine + ": the store is out of space; writes are refused until space is freed: " + e.Err.Error()
}

func (e *FullError) Unwrap() error { return e.Err }

// FaultKind: the store's space is a limit like any other.
func (e *FullError) FaultKind() fault.Kind { return fault.Exhausted }

// FaultReason: the store's own space, not the caller's budget.
func (e *FullError) FaultReason() fault.Reason { return fault.ReasonStoreFull }

// SpaceWatch remembers that an engine ran out of space, from the first
// write refused for it until a probe write that needs new room succeeds,
// so health can report the store not ready in between. An engine holds
// one and passes every write's error through Note.
type SpaceWatch struct {
	engine string
	full   atomic.Bool
}

// NewSpaceWatch watches engine's writes.
func NewSpaceWatch(engine string) *SpaceWatch { return &SpaceWatch{engine: engine} }

// Note returns err, as a *FullError when it says the engine ran out of
// space, and remembers that it did.
func (w *SpaceWatch) Note(err error) error {
	err = OutOfSpace(w.engine, err)
	var fe *FullError
	if errors.As(err, &fe) {
		w.full.Store(true)
	}
	return err
}

// Full reports whether a write was refused for space since the last
// probe that succeeded.
func (w *SpaceWatch) Full() bool { return w.full.Load() }

// Cleared records that a write went through again: the engine has space.
func (w *SpaceWatch) Cleared() { w.full.Store(false) }

// OutOfSpace wraps err as a FullError of engine when it says the engine
// ran out of space, and returns it unchanged otherwise: SQLite's
// SQLITE_FULL (13), Postgres' disk_full (53100), or ENOSPC from the OS.
func OutOfSpace(engine string, err error) error {
	if err == nil {
		return nil
	}
	var fe *FullError
	if errors.As(err, &fe) {
		return err
	}
	full := errors.Is(err, syscall.ENOSPC)
	var coded interface{ Code() int }
	if errors.As(err, &coded) && coded.Code()&0xff == 13 {
		full = true
	}
	var pg interface{ SQLState() string }
	if errors.As(err, &pg) && pg.SQLState() == "53100" {
		full = true
	}
	if !full {
		return err
	}
	return &FullError{Engine: engine, Err: err}
}

// UnavailableKind classifies for fault.Of what Unavailable recognises: a
// driver's connection errors carry no kind of their own.
func UnavailableKind(err error) (fault.Kind, bool) { return fault.Unavailable, Unavailable(err) }

// Unavailable reports whether err says the database could not be reached
// (refused or reset connections, a server shutting down, a connection
// lost mid-call) rather than that a statement failed. It reads the error
// through small interfaces the drivers implement (pgconn's SafeToRetry and
// SQLState), so callers need no driver import.
func Unavailable(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, ErrUnavailable) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) {
		return true
	}
	// A file's failure is no outage: a syscall.Errno is a net.Error too,
	// so a missing, unreadable or full file would otherwise read as "the
	// store is unavailable, retry" (fault.FileKind classifies it).
	if _, ok := fault.FileKind(err); ok {
		return false
	}
	var netErr net.Error
	if errors.As(err, &netErr) {
		return true
	}
	var retry interface{ SafeToRetry() bool }
	if errors.As(err, &retry) && retry.SafeToRetry() {
		return true
	}
	// SQLite: the database is busy or locked past the busy timeout (the
	// single writer held too long); the same call may succeed later.
	var coded interface{ Code() int }
	if errors.As(err, &coded) {
		if c := coded.Code() & 0xff; c == 5 || c == 6 { // SQLITE_BUSY, SQLITE_LOCKED
			return true
		}
	}
	var pg interface{ SQLState() string }
	if errors.As(err, &pg) {
		code := pg.SQLState()
		// Class 08: connection exception; 57P01-57P03: admin shutdown,
		// crash shutdown, cannot connect now; 53300: too many connections;
		// 57014: the statement was cancelled, by a statement timeout or a
		// cancel request meant for an earlier statement on the connection
		// (a caller's own cancellation is told apart by its context, at
		// the edge and in jobs): the same call may succeed later.
		return strings.HasPrefix(code, "08") || code == "57P01" || code == "57P02" || code == "57P03" || code == "53300" || code == "57014"
	}
	return false
}

// Store is everything the services need from a database.
type Store interface {
	Groups
	Messages
	Consent
	Jobs
	Backups
	ScheduleTicks
	Expiry
	OwnerKeys
	KEKRetirements
	Holds
	Erasure
	HistoryFiles
	Tombstones
	Replacing
	// Snapshot runs fn over one consistent, read-only view of the owner's
	// records: what export reads, so that every record it writes is as it
	// stood at a single instant.
	Snapshot(ctx context.Context, owner string, fn func(Snapshot) error) error
	// Ping checks that the database answers, for health.
	Ping(ctx context.Context) error
	// ProbeWrite writes a row of the store's own (store_probe), for
	// health: a store that answers reads but refuses writes (out of
	// space, a read-only standby) is not ready. After a write was refused
	// for space it succeeds only once a write needing new room does; a
	// *FullError says why it failed.
	ProbeWrite(ctx context.Context) error
	// Close releases the engine's connections.
	Close() error
}

// Expiry deletes disappearing messages once their deadline has passed.
type Expiry interface {
	// PurgeExpired deletes messages whose expires_at_ns is at or before
	// now: up to perOwner of each of the next owners owners, in owner
	// order after afterOwner, that hold any. It returns how many it
	// deleted and the last owner it reached; a pass continues from there,
	// and "" means it reached the last owner, so each owner gets its turn
	// however large another's backlog.
	PurgeExpired(ctx context.Context, now time.Time, afterOwner string, owners, perOwner int) (deleted int64, lastOwner string, err error)
	// OldestExpired is the earliest deadline at or before now of a message
	// still stored, or zero when none is: how far the purge lags.
	OldestExpired(ctx context.Context, now time.Time) (time.Time, error)
}

// Tombstones remember what an owner's writes removed from its exportable
// state, stamped with the removing write's change sequence: a restore of
// a chain of backups reads them to leave out what a member held and a
// later write removed (import can add, never remove: ARCH-013, ARCH-014).
// DeleteMessage leaves one per message; PutGroup leaves one for the group
// when it stops being exportable (records.GroupExportable).
type Tombstones interface {
	// HasTombstones reports whether owner has a tombstone with a change
	// sequence in (above, atMost].
	HasTombstones(ctx context.Context, owner string, above, atMost int64) (bool, error)
	// GroupTombstones returns up to limit of the group's tombstones with a
	// change sequence in (above, atMost], one per key with the newest
	// change sequence of its key, in key order (the group's own first,
	// then messages by send time and id), starting after the key after
	// (nil for the first page).
	GroupTombstones(ctx context.Context, owner string, groupID []byte, above, atMost int64, after *TombstoneKey, limit int) ([]Tombstone, error)
	// PruneTombstones deletes owner's tombstones that no restore can
	// need: those at or below the change sequence of its oldest complete
	// backup that has one (every chain starts at or above it). With no
	// such backup it deletes none. It returns how many it deleted.
	PruneTombstones(ctx context.Context, owner string) (int64, error)
}

// Replacing is what a restore in replace mode writes beside an import's
// merges: it rewrites an owner's records to a snapshot, so it sets
// records as given and deletes what the snapshot lacks. Every write is a
// change (stamped, and a removal leaves its tombstone), so increments and
// chains taken after it see it.
type Replacing interface {
	// ReplaceGroup creates or overwrites a group with every field as
	// given, its membership state included (a Restored group too).
	ReplaceGroup(ctx context.Context, owner string, g *gb.GroupSave) error
	// DeleteGroup deletes a group and every message of it, leaving the
	// group's tombstone. A group that does not exist is ErrNotFound.
	DeleteGroup(ctx context.Context, owner string, id []byte) error
	// DeleteMessageByID deletes the message stored under id, in whatever
	// group, leaving its tombstone, and reports whether there was one.
	DeleteMessageByID(ctx context.Context, owner string, id []byte) (bool, error)
	// ReplaceConsent stores each record as given, whatever the stored
	// record's consented_at_ns.
	ReplaceConsent(ctx context.Context, owner string, records []*cs.ConsentSave) error
	// DeleteConsent deletes the records at keys; a missing one is no
	// error.
	DeleteConsent(ctx context.Context, owner string, keys []ConsentKey) error
	// RaiseBaseFloor records that owner's records were replaced up to
	// now: it raises the owner's change sequence and returns it as the
	// floor below which no backup may be the base of an increment.
	RaiseBaseFloor(ctx context.Context, owner string) (int64, error)
	// BaseFloor is the owner's floor (0: never raised).
	BaseFloor(ctx context.Context, owner string) (int64, error)
}

// TombstoneKey orders a group's tombstones as an export orders its
// records: the group's own (GroupTombstoneSentAt, no id) first, then its
// messages by send time and id.
type TombstoneKey struct {
	SentAtNs int64
	ID       []byte
}

// GroupTombstoneSentAt is the send time a group's own tombstone is keyed
// at, before any message's.
const GroupTombstoneSentAt = math.MinInt64

// IsGroup reports whether the key is the group's own.
func (k TombstoneKey) IsGroup() bool { return k.SentAtNs == GroupTombstoneSentAt && len(k.ID) == 0 }

// Tombstone is one removal: the newest change sequence that removed the
// record at Key.
type Tombstone struct {
	Key       TombstoneKey
	ChangeSeq int64
}

// Groups stores conversations.
type Groups interface {
	// PutGroup creates or replaces a live group and reports whether it was
	// created. Putting over a Restored group fails with ErrGroupInactive.
	PutGroup(ctx context.Context, owner string, g *gb.GroupSave) (created bool, err error)
	// GetGroup returns one group or ErrNotFound.
	GetGroup(ctx context.Context, owner string, id []byte) (*gb.GroupSave, error)
	// ListGroups returns up to limit groups whose id sorts after after
	// (bytewise), in id order.
	ListGroups(ctx context.Context, owner string, after []byte, limit int) ([]*gb.GroupSave, error)
	// ActivateGroup moves a Restored group to Allowed (JOIN-080, ARCH-026)
	// and returns it. An Allowed group is returned unchanged with
	// activated false; any other state is ErrFailedPrecondition.
	ActivateGroup(ctx context.Context, owner string, id []byte) (g *gb.GroupSave, activated bool, err error)
	// MergeGroups applies archived groups under the import rules: a new id
	// is created Restored with every archived field kept (ARCH-020,
	// ARCH-024); a known id keeps its state, membership and metadata, and
	// its last_message_ns becomes the greater of the two (ARCH-014).
	// Outcomes are in input order.
	MergeGroups(ctx context.Context, owner string, groups []*gb.GroupSave) ([]Outcome, error)
}

// Messages stores group messages.
type Messages interface {
	// AppendMessages stores messages in one transaction, with their
	// identifier fields derived from a typed envelope first (Derive): so
	// every stored message has them as ARCH-008 decides, and export reads
	// them as stored. Every group named
	// must exist (ErrNotFound) and, unless opts.AllowRestored, must not be
	// Restored (ErrGroupInactive); on either failure nothing is written. A
	// message whose id is already stored, or repeats an earlier id of the
	// same call, is left unchanged (ARCH-013). Outcomes are in input order.
	AppendMessages(ctx context.Context, owner string, msgs []*mb.GroupMessageSave, opts AppendOptions) ([]Outcome, error)
	// ListMessages returns up to q.Limit messages of one group in send
	// order (sent_at_ns, then id), after the cursor q.After when set.
	ListMessages(ctx context.Context, owner string, q MessageQuery) (MessagePage, error)
	// StreamMessages calls fn with each message of the page ListMessages
	// would return, in order, as its row arrives, so a caller can work on
	// a page while the rest of it is read. fn's error stops the page and
	// is returned as it is. full reports what MessagePage.Full does.
	StreamMessages(ctx context.Context, owner string, q MessageQuery, fn func(*mb.GroupMessageSave) error) (full bool, err error)
	// DeleteMessage deletes one message of a group when allow, called with
	// the message and its group inside the deleting transaction, returns
	// nil; otherwise nothing changes and allow's error is returned. A
	// message that does not exist in that group is ErrNotFound.
	DeleteMessage(ctx context.Context, owner string, groupID, id []byte, allow func(*mb.GroupMessageSave, *gb.GroupSave) error) error
	// MessagesExist reports, for each id in order, whether the owner
	// stores a message with it (an import's dry run).
	MessagesExist(ctx context.Context, owner string, ids [][]byte) ([]bool, error)
}

// Consent stores consent records, keyed by (entity_type, entity).
type Consent interface {
	// MergeConsent stores each record unless the stored record for its key
	// has an equal or greater consented_at_ns (NOTES.md's CONS-010 rule).
	// Outcomes are in input order; a later record of the same call merges
	// against an earlier one.
	MergeConsent(ctx context.Context, owner string, records []*cs.ConsentSave) ([]Outcome, error)
	// ListConsent returns up to limit records after the key after (nil for
	// the first page), ordered by entity type, then entity.
	ListConsent(ctx context.Context, owner string, after *ConsentKey, limit int) ([]*cs.ConsentSave, error)
	// GetConsent returns the owner's record for key, or ErrNotFound.
	GetConsent(ctx context.Context, owner string, key ConsentKey) (*cs.ConsentSave, error)
}

// Snapshot is a consistent read-only view of one owner's records. Its
// iterators stream: they hold one page or one row at a time, never a whole
// table.
type Snapshot interface {
	// ChangeSeq is the owner's change sequence as the snapshot sees it:
	// every record it holds was written at or before this point, and every
	// record written later is above it.
	ChangeSeq(ctx context.Context) (int64, error)
	// ChangedAfter is the same snapshot seen through a filter: only the
	// groups, messages and consent records written after seq, and the
	// groups of those messages (an incremental export).
	ChangedAfter(seq int64) Snapshot
	// EachGroup calls fn for every group in id order.
	EachGroup(ctx context.Context, fn func(*gb.GroupSave) error) error
	// EachMessage calls fn for every message of the group, in send order,
	// that the query's window admits (q.GroupID set, q.After and q.Limit
	// ignored). It streams one query: fn must not read the snapshot.
	EachMessage(ctx context.Context, q MessageQuery, fn func(*mb.GroupMessageSave) error) error
	// EachConsent calls fn for every consent record in key order.
	EachConsent(ctx context.Context, fn func(*cs.ConsentSave) error) error
}

// AppendOptions changes the rules of AppendMessages for import.
type AppendOptions struct {
	// AllowRestored lets import add history to the Restored groups it
	// created; the services never set it.
	AllowRestored bool
	// MostlyNew says the caller expects few of the messages to be stored
	// already (an import into an owner that does not have them yet): an
	// engine may then skip looking their ids up first and write the batch
	// at once, falling back to the careful path when one is stored. The
	// outcomes are the same either way.
	MostlyNew bool
}

// Outcome is what a write did to one record.
type Outcome uint8

const (
	// Inserted: the record was new and is now stored.
	Inserted Outcome = iota + 1
	// Updated: an existing record changed (a newer consent, or a known
	// group's last_message_ns raised by import).
	Updated
	// Unchanged: the stored record was kept as it was.
	Unchanged
)

func (o Outcome) String() string {
	switch o {
	case Inserted:
		return "inserted"
	case Updated:
		return "updated"
	case Unchanged:
		return "unchanged"
	}
	return "unknown"
}

// MessageQuery selects a page of one group's messages.
type MessageQuery struct {
	GroupID []byte
	// The window of ARCH-009: sent_at_ns > *StartNs and <= *EndNs.
	StartNs, EndNs *int64
	// After is the last message of the previous page; nil for the first.
	After *MessageCursor
	Limit int
	// ExcludeRestoredUnknownExpiry leaves out messages that came in by
	// archive import and whose expiry is unknown (ARCH-009, ARCH-019).
	ExcludeRestoredUnknownExpiry bool
	// LiveAtNs, when set, leaves out the messages that had expired by
	// then (expires_at_ns at or before it): an expired message is never
	// listed nor exported, whether or not the purge has deleted it yet.
	LiveAtNs int64
	// ChangedAfter, when set, keeps only the messages written after that
	// point of the owner's change sequence (Snapshot.ChangeSeq).
	ChangedAfter *int64
	// MaxBytes, when set, ends a page (ListMessages only) before the
	// content it holds would pass MaxBytes; its first message is always
	// included, so every message can be read.
	MaxBytes int
}

// MessagePage is a page of ListMessages.
type MessagePage struct {
	Messages []*mb.GroupMessageSave
	// Full: the page ended at q.MaxBytes with messages left to read.
	Full bool
}

// errPageFull stops a page's row loop once the page holds MaxBytes.
var errPageFull = errors.New("page full")

// CollectPage gathers a ListMessages page from each, which calls fn for
// every row of q in order and stops when fn errs: at most q.Limit rows and
// q.MaxBytes of content, so a page of large messages is never read whole.
func CollectPage(q MessageQuery, each func(fn func(*mb.GroupMessageSave) error) error) (MessagePage, error) {
	page := make([]*mb.GroupMessageSave, 0, min(max(q.Limit, 0), SnapshotPageSize))
	full, err := StreamPage(q, each, func(m *mb.GroupMessageSave) error {
		page = append(page, m)
		return nil
	})
	return MessagePage{Messages: page, Full: full}, err
}

// StreamPage is CollectPage handing each message to fn instead of
// gathering them.
func StreamPage(q MessageQuery, each func(fn func(*mb.GroupMessageSave) error) error, fn func(*mb.GroupMessageSave) error) (full bool, err error) {
	size, n := 0, 0
	err = each(func(m *mb.GroupMessageSave) error {
		c := len(m.GetDecryptedMessageBytes())
		if q.MaxBytes > 0 && n > 0 && size+c > q.MaxBytes {
			return errPageFull
		}
		size += c
		n++
		return fn(m)
	})
	if errors.Is(err, errPageFull) {
		return true, nil
	}
	return false, err
}

// MessageCursor is a position in send order.
type MessageCursor struct {
	SentAtNs int64
	ID       []byte
}

// ConsentKey identifies a consent record.
type ConsentKey struct {
	EntityType cs.ConsentTypeSave
	Entity     string
}

// Restored returns a copy of an archived group in the state import creates
// it in (ARCH-015): Restored, every other field as archived (ARCH-020).
func Restored(g *gb.GroupSave) *gb.GroupSave {
	c := proto.Clone(g).(*gb.GroupSave)
	c.MembershipState = gb.GroupMembershipStateSave_GROUP_MEMBERSHIP_STATE_SAVE_RESTORED
	return c
}

// Later reports whether an imported last_message_ns is later than the
// stored one, treating absent as earliest (ARCH-014's greater of the two).
func Later(imported, stored *int64) bool {
	return imported != nil && (stored == nil || *imported > *stored)
}

// CheckPut decides a PutGroup over the stored group (nil when there is
// none): a Restored group is not put over (ErrGroupInactive).
func CheckPut(stored *gb.GroupSave) error {
	if stored.GetMembershipState() == gb.GroupMembershipStateSave_GROUP_MEMBERSHIP_STATE_SAVE_RESTORED {
		return fmt.Errorf("group %x: %w", stored.GetId(), ErrGroupInactive)
	}
	return nil
}

// Activate decides an ActivateGroup of the stored group: it moves a
// Restored group to Allowed and reports true, leaves an Allowed one and
// reports false, and refuses every other state.
func Activate(g *gb.GroupSave) (bool, error) {
	switch g.GetMembershipState() {
	case gb.GroupMembershipStateSave_GROUP_MEMBERSHIP_STATE_SAVE_ALLOWED:
		return false, nil
	case gb.GroupMembershipStateSave_GROUP_MEMBERSHIP_STATE_SAVE_RESTORED:
		g.MembershipState = gb.GroupMembershipStateSave_GROUP_MEMBERSHIP_STATE_SAVE_ALLOWED
		return true, nil
	default:
		return false, fmt.Errorf("group %x is %s, not restored: %w", g.GetId(), g.GetMembershipState(), ErrFailedPrecondition)
	}
}

// Derive sets each message's identifier fields from its typed envelope
// (ARCH-008) before an engine stores it: the one place every write of a
// message passes.
func Derive(msgs []*mb.GroupMessageSave) {
	for _, m := range msgs {
		records.DeriveIdentifiers(m)
	}
}
