package main

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"

	"google.golang.org/protobuf/encoding/protojson"

	cb "github.com/contentbackup/contentbackup/api/contentbackup/v1"
	"github.com/contentbackup/contentbackup/internal/archive"
	"github.com/contentbackup/contentbackup/internal/backup"
)

type verifyCmd struct {
	keyFlags
	Sidecar string `type:"existingfile" help:"The export job's sidecar (<archive>.summary.json): the file must also have the length and SHA-256 it records."`
	File    string `arg:"" type:"existingfile" predictor:"file" help:"Archive file."`
}

// checkSidecar compares the file with the summary an export job wrote
// beside it: the container has no end marker, so only the summary proves
// an archive whole.
func checkSidecar(sidecar, file string) error {
	b, err := os.ReadFile(sidecar)
	if err != nil {
		return err
	}
	result := &cb.ExportJobResult{}
	if err := protojson.Unmarshal(b, result); err != nil {
		return fmt.Errorf("sidecar %s: %w", sidecar, err)
	}
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return err
	}
	sum := result.GetSummary()
	if !matches(sum, uint64(n), h) {
		return fmt.Errorf("%s is %d bytes with sha256 %x; its sidecar records %d bytes with %x: not the archive the job wrote", file, n, h.Sum(nil), sum.GetArchiveBytes(), sum.GetSha256())
	}
	return nil
}

// incompleteError ends a verify that found a problem, which the report
// above it has named: its line says only that, and the hints read its
// cause (a record that fails authentication: the wrong key?).
type incompleteError struct{ cause error }

func (v *verifyCmd) Run(c *cli) error {
	key, err := v.key()
	if err != nil {
		return err
	}
	if v.Sidecar != "" {
		if err := checkSidecar(v.Sidecar, v.File); err != nil {
			return err
		}
	}
	f, err := os.Open(v.File)
	if err != nil {
		return err
	}
	defer f.Close()
	rep, err := backup.Verify(f, key, archive.ReaderOptions{})
	if err != nil {
		return err
	}
	out := map[string]any{
		"version": rep.Version, "metadata": metadataJSON(rep.Metadata), "records": rep.Records, "groups": rep.Groups,
		"messages": rep.Messages, "consent_records": rep.Consent, "skipped": rep.Skipped, "legacy_records": rep.Legacy, "complete": rep.Err == nil,
	}
	text := fmt.Sprintf("records:  %d (%d groups, %d messages, %d consent, %d skipped, %d under the legacy nonce)\n",
		rep.Records, rep.Groups, rep.Messages, rep.Consent, rep.Skipped, rep.Legacy)
	if rep.Err != nil {
		out["problem"] = rep.Err.Error()
		var re *archive.RecordError
		if errors.As(rep.Err, &re) {
			out["problem_record"] = re.Record
		}
		text += "problem:  " + rep.Err.Error() + "\n"
	} else {
		text += "complete: every record opens and the stream ends cleanly\n"
	}
	if err := c.output(out, text); err != nil {
		return err
	}
	if rep.Err != nil {
		return incompleteError{rep.Err}
	}
	return nil
}

func (e incompleteError) Error() string { return "the archive is not complete" }

func (e incompleteError) Unwrap() error { return e.cause }
