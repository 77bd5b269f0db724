package main

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	cb "github.com/contentbackup/contentbackup/api/contentbackup/v1"
)

type lintCmd struct {
	Owner string `required:"" help:"Owner (inbox) whose stored records to check."`
}

// lintRow is one finding as printed.
type lintRow struct {
	Kind     string `json:"kind"`
	Record   string `json:"record"`
	Field    string `json:"field"`
	Problem  string `json:"problem"`
	Repair   string `json:"repair,omitempty"`
	Messages uint64 `json:"messages_left_out_with_it,omitempty"`
}

func (l *lintCmd) Run(ctx context.Context, c *cli) error {
	conn, err := c.dial()
	if err != nil {
		return err
	}
	defer conn.Close()
	stream, err := cb.NewArchiveServiceClient(conn).Lint(ctx, &cb.LintRequest{Owner: l.Owner})
	if err != nil {
		return fmt.Errorf("lint: %w", err)
	}
	rows := []lintRow{}
	var summary *cb.LintSummary
	for {
		m, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("lint: %w", err)
		}
		for _, f := range m.GetFindings() {
			rows = append(rows, rowOf(f))
		}
		if m.GetSummary() != nil {
			summary = m.GetSummary()
		}
	}
	if summary == nil {
		return errors.New("lint: the stream ended without a summary; the list is incomplete")
	}
	var text strings.Builder
	if len(rows) > 0 {
		tw := tabwriter.NewWriter(&text, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "KIND\tRECORD\tFIELD\tPROBLEM\tREPAIR")
		for _, r := range rows {
			repair := r.Repair
			if repair == "" {
				repair = "none: left out by --nonconforming=exclude|repair"
				if r.Messages > 0 {
					repair += fmt.Sprintf(", with its %d messages", r.Messages)
				}
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r.Kind, r.Record, r.Field, r.Problem, repair)
		}
		tw.Flush()
	}
	fmt.Fprintf(&text, "checked %d groups, %d messages, %d consent records: %d nonconforming, %d repairable\n",
		summary.GetGroups(), summary.GetMessages(), summary.GetConsentRecords(), summary.GetFindings(), summary.GetRepairable())
	sj, err := protoJSON(summary)
	if err != nil {
		return err
	}
	if err := c.output(map[string]any{"summary": json.RawMessage(sj), "findings": rows}, text.String()); err != nil {
		return err
	}
	if summary.GetFindings() > 0 {
		fmt.Fprintln(os.Stderr, "archivectl: exports of this owner fail unless given --nonconforming=exclude or repair")
	}
	return nil
}

func rowOf(f *cb.LintFinding) lintRow {
	r := lintRow{Field: f.GetField(), Problem: f.GetProblem(), Repair: f.GetRepair(), Messages: f.GetMessages()}
	switch f.GetKind() {
	case cb.RecordKind_RECORD_KIND_GROUP:
		r.Kind, r.Record = "group", hex.EncodeToString(f.GetId())
	case cb.RecordKind_RECORD_KIND_MESSAGE:
		r.Kind, r.Record = "message", hex.EncodeToString(f.GetId())
	default:
		r.Kind = "consent"
		r.Record = strings.TrimPrefix(f.GetConsentType().String(), "CONSENT_TYPE_SAVE_") + " " + f.GetConsentEntity()
	}
	return r
}
