package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"cloud.google.com/go/longrunning/autogen/longrunningpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	cb "github.com/contentbackup/contentbackup/api/contentbackup/v1"
)

// ownersCmd acts on an owner as a whole: erasure.
type ownersCmd struct {
	Erase    eraseOwnerCmd    `cmd:"" help:"Erase an owner everywhere (needs owners.erase): its key first, then its records, backups in every bucket, catalog rows and jobs; keeps only the erasure's own record. Refused while a legal hold is set. --dry-run lists what would go."`
	Erasures ownerErasuresCmd `cmd:"" help:"Show an owner name's erasure record (whether schedules skip it) and every erasure of it, each with its own operation (needs owners.erase)."`
	Reenable reenableOwnerCmd `cmd:"" help:"Let schedules back up an erased owner's name again, once it belongs to someone else (needs owners.erase; --reason is the audit record)."`
}

type ownerErasuresCmd struct {
	Owner string `required:"" help:"The owner (inbox)."`
}

func (e *ownerErasuresCmd) Run(ctx context.Context, c *cli) error {
	conn, err := c.dial()
	if err != nil {
		return err
	}
	defer conn.Close()
	rec, err := cb.NewBackupServiceClient(conn).GetOwnerErasure(ctx, &cb.GetOwnerErasureRequest{Owner: e.Owner})
	if err != nil {
		return err
	}
	q, _ := json.Marshal(e.Owner)
	req := &longrunningpb.ListOperationsRequest{Name: "operations", Filter: "owner = " + string(q), PageSize: 100}
	var erasures []*longrunningpb.Operation
	for {
		resp, err := longrunningpb.NewOperationsClient(conn).ListOperations(ctx, req)
		if err != nil {
			return fmt.Errorf("list the owner's erasures: %w", err)
		}
		for _, op := range resp.GetOperations() {
			md := &cb.JobMetadata{}
			if op.GetMetadata().UnmarshalTo(md) == nil && md.GetKind() == cb.JobKind_JOB_KIND_ERASE && !md.GetValidateOnly() {
				erasures = append(erasures, op)
			}
		}
		if req.PageToken = resp.GetNextPageToken(); req.PageToken == "" {
			break
		}
	}
	if c.JSON {
		b, err := protoJSON(rec)
		if err != nil {
			return err
		}
		ops := make([]json.RawMessage, 0, len(erasures))
		for _, op := range erasures {
			ob, err := protoJSON(op)
			if err != nil {
				return err
			}
			ops = append(ops, ob)
		}
		return c.output(map[string]any{"record": json.RawMessage(b), "erasures": ops}, "")
	}
	fmt.Print(ownerErasureText(rec))
	fmt.Println("OPERATION  KIND  STATE  OWNER  OBJECT  PROGRESS")
	for _, op := range erasures {
		fmt.Println(summaryLine(op))
	}
	return nil
}

// ownerErasureText is an erasure record for people.
func ownerErasureText(r *cb.OwnerErasure) string {
	var b strings.Builder
	fmt.Fprintf(&b, "owner %s: erased by %s from %s\n", r.GetOwner(), r.GetOperation(), r.GetEraseTime().AsTime().UTC().Format(time.RFC3339))
	if r.GetSchedulesSkip() {
		b.WriteString("schedules skip the name until it is re-enabled (archivectl owners reenable)\n")
	} else {
		fmt.Fprintf(&b, "re-enabled for schedules by %s at %s: %s\n", r.GetReenabledBy(), r.GetReenableTime().AsTime().UTC().Format(time.RFC3339), r.GetReason())
	}
	return b.String()
}

type reenableOwnerCmd struct {
	Owner  string `required:"" help:"The erased owner (inbox)."`
	Reason string `required:"" help:"Why the name may be backed up again (at most 512 printable bytes)."`
}

func (e *reenableOwnerCmd) Run(ctx context.Context, c *cli) error {
	conn, err := c.dial()
	if err != nil {
		return err
	}
	defer conn.Close()
	rec, err := cb.NewBackupServiceClient(conn).ReenableOwner(ctx, &cb.ReenableOwnerRequest{Owner: e.Owner, Reason: e.Reason})
	if err != nil {
		return err
	}
	if c.JSON {
		b, err := protoJSON(rec)
		if err != nil {
			return err
		}
		return c.output(json.RawMessage(b), "")
	}
	fmt.Print(ownerErasureText(rec))
	return nil
}

type eraseOwnerCmd struct {
	Owner     string `required:"" help:"The owner (inbox) to erase."`
	DryRun    bool   `name:"dry-run" help:"Report what would be erased; erase nothing."`
	RequestID string `name:"request-id" help:"Makes the start idempotent: a start repeating it returns the first erasure's operation."`
	NoWait    bool   `name:"no-wait" help:"Print the operation and return; follow it with jobs wait."`
}

func (e *eraseOwnerCmd) Run(ctx context.Context, c *cli) error {
	conn, err := c.dial()
	if err != nil {
		return err
	}
	defer conn.Close()
	op, err := cb.NewBackupServiceClient(conn).EraseOwner(ctx, &cb.EraseOwnerRequest{Owner: e.Owner, DryRun: e.DryRun, RequestId: e.RequestID})
	if err != nil {
		return err
	}
	if e.NoWait {
		return c.printOperation(op)
	}
	return c.waitFor(ctx, conn, op.GetName(), true)
}

// eraseText is an erasure's result for people.
func eraseText(r *cb.EraseOwnerResult) string {
	var b strings.Builder
	verb := "erased"
	if r.GetDryRun() {
		verb = "would erase (dry run: nothing was erased)"
	}
	fmt.Fprintf(&b, "%s: %d backups, %d objects; owner key destroyed: %v\n", verb, r.GetBackups(), r.GetObjects(), r.GetKeyDestroyed())
	if n := r.GetJobsCancelled(); n > 0 {
		what := "cancelled first"
		if r.GetDryRun() {
			what = "running, which an erasure cancels first"
		}
		fmt.Fprintf(&b, "%d jobs of the owner (or reading its backups) %s\n", n, what)
	}
	for _, t := range r.GetRows() {
		fmt.Fprintf(&b, "  %-15s %d rows\n", t.GetTable(), t.GetRows())
	}
	switch {
	case r.GetUnreadableSince() != nil:
		fmt.Fprintf(&b, "complete: readable by nothing the server holds from %s\n", r.GetUnreadableSince().AsTime().UTC().Format(time.RFC3339))
	case len(r.GetWaitingOnKeks()) > 0:
		fmt.Fprintf(&b, "not complete yet: the deleted key rows the database files keep are wrapped by key-encryption key %s until it is retired (archivectl keys status says what comes next)\n",
			strings.Join(r.GetWaitingOnKeks(), ", "))
	}
	return b.String()
}

// holdsCmd places, lifts and lists legal holds.
type holdsCmd struct {
	Set     setHoldCmd     `cmd:"" help:"Place a legal hold on an owner, or with --backup on one backup (needs owners.hold): kept past retention, DeleteBackup and erasure until released or --for has passed. Each hold is its own record beside any others on the target; --hold changes one."`
	Release releaseHoldCmd `cmd:"" help:"Lift one legal hold (--hold names it when several stand on the target); the others stay."`
	List    listHoldsCmd   `cmd:"" help:"List an owner's legal holds."`
}

type setHoldCmd struct {
	Owner  string        `required:"" help:"The owner (inbox)."`
	Backup string        `help:"Hold this backup only (its catalog id); without it, the owner and every backup of it."`
	Reason string        `required:"" help:"The case or request the hold is for (at most 512 printable bytes)."`
	For    time.Duration `name:"for" help:"The hold lapses by itself after this long (e.g. 2160h); without it, it lasts until released."`
	Hold   string        `name:"hold" help:"Change this hold (its HOLD id in holds list: reason and end) rather than place a new one beside the others."`
}

func (s *setHoldCmd) Run(ctx context.Context, c *cli) error {
	req := &cb.SetLegalHoldRequest{Owner: s.Owner, Backup: s.Backup, Reason: s.Reason, HoldId: s.Hold}
	if s.For < 0 {
		return errors.New("--for: a duration from now, e.g. 2160h")
	}
	if s.For > 0 {
		req.EndTime = timestamppb.New(time.Now().Add(s.For))
	}
	conn, err := c.dial()
	if err != nil {
		return err
	}
	defer conn.Close()
	h, err := cb.NewBackupServiceClient(conn).SetLegalHold(ctx, req)
	if err != nil {
		return err
	}
	return c.printHolds([]*cb.LegalHold{h})
}

type releaseHoldCmd struct {
	Owner  string `required:"" help:"The owner (inbox)."`
	Backup string `help:"The held backup; without it, the owner's own hold."`
	Hold   string `name:"hold" help:"The hold to release (its HOLD id in holds list); needed when several stand on the target, whose others stay."`
}

func (r *releaseHoldCmd) Run(ctx context.Context, c *cli) error {
	conn, err := c.dial()
	if err != nil {
		return err
	}
	defer conn.Close()
	if _, err := cb.NewBackupServiceClient(conn).ReleaseLegalHold(ctx, &cb.ReleaseLegalHoldRequest{Owner: r.Owner, Backup: r.Backup, HoldId: r.Hold}); err != nil {
		return err
	}
	fmt.Println("released")
	return nil
}

type listHoldsCmd struct {
	Owner string `required:"" help:"The owner (inbox)."`
}

func (l *listHoldsCmd) Run(ctx context.Context, c *cli) error {
	conn, err := c.dial()
	if err != nil {
		return err
	}
	defer conn.Close()
	resp, err := cb.NewBackupServiceClient(conn).ListLegalHolds(ctx, &cb.ListLegalHoldsRequest{Owner: l.Owner})
	if err != nil {
		return err
	}
	return c.printHolds(resp.GetHolds())
}

func (c *cli) printHolds(holds []*cb.LegalHold) error {
	if c.JSON {
		out := make([]json.RawMessage, 0, len(holds))
		for _, h := range holds {
			j, err := protoJSON(h)
			if err != nil {
				return err
			}
			out = append(out, j)
		}
		return c.output(out, "")
	}
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "HOLD\tOWNER\tBACKUP\tIN FORCE\tUNTIL\tSET BY\tSINCE\tREASON")
	for _, h := range holds {
		backup, until := h.GetBackup(), "released"
		if backup == "" {
			backup = "(all)"
		}
		if h.GetEndTime() != nil {
			until = h.GetEndTime().AsTime().UTC().Format(time.RFC3339)
		}
		reason := h.GetReason()
		if reason == "" {
			reason = "(another holder's)"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%v\t%s\t%s\t%s\t%s\n", h.GetHoldId(), h.GetOwner(), backup, h.GetInForce(), until, h.GetPrincipal(),
			h.GetCreateTime().AsTime().UTC().Format(time.RFC3339), reason)
	}
	return w.Flush()
}

// keysCmd reports on the server's key hierarchy.
type keysCmd struct {
	Status keyStatusCmd `cmd:"" help:"Which key-encryption keys wrap the catalog's owner keys (needs admin); a rotation is done when no row is under a KEK but the current one."`
}

type keyStatusCmd struct{}

func (k *keyStatusCmd) Run(ctx context.Context, c *cli) error {
	conn, err := c.dial()
	if err != nil {
		return err
	}
	defer conn.Close()
	st, err := cb.NewBackupServiceClient(conn).GetKeyStatus(ctx, &cb.GetKeyStatusRequest{})
	if err != nil {
		return err
	}
	if c.JSON {
		b, err := protoJSON(st)
		if err != nil {
			return err
		}
		return c.output(json.RawMessage(b), "")
	}
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "KEK\tSTATE\tOWNER KEYS\tLEGACY BACKUPS")
	for _, u := range st.GetKeks() {
		fmt.Fprintf(w, "%s\t%s\t%d\t%d\n", u.GetFingerprint(), u.GetState(), u.GetOwnerKeys(), u.GetLegacyBackups())
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if rs := st.GetRetirements(); len(rs) > 0 {
		fmt.Println()
		w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(w, "RETIRING KEK\tERASURES\tRETIRED\tDESTROYED\tNEXT")
		for _, r := range rs {
			when := func(ts *timestamppb.Timestamp) string {
				if ts == nil {
					return "-"
				}
				return ts.AsTime().UTC().Format(time.RFC3339)
			}
			next := r.GetNextStep()
			if next == "" {
				next = "done"
			}
			fmt.Fprintf(w, "%s\t%d\t%s\t%s\t%s\n", r.GetFingerprint(), len(r.GetErasures()), when(r.GetRetireTime()),
				when(r.GetDestroyTime()), next)
		}
		if err := w.Flush(); err != nil {
			return err
		}
	}
	if n := st.GetRetiredRows(); n > 0 {
		fmt.Printf("%d rows still under a KEK other than the current one: keep it until the key worker has rewrapped them\n", n)
	} else {
		fmt.Println("every row is under the current KEK: a retiring KEK can be removed")
	}
	return nil
}
