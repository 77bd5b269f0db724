package main

import (
	"fmt"

	"strings"
	"testing"

	"github.com/contentbackup/contentbackup/internal/archive"
)

// TestHintForAnotherOwnersBackupByPrefix (issue 51): restoring by a
// prefix that no backup of the owner has gets the --source-owner hint, as
// a whole id the server does not find gets it.
func TestHintForAnotherOwnersBackupByPrefix(t *testing.T) {
	c := &cli{}
	c.Restore.Owner = "bob"
	err := fmt.Errorf("%w: no backup of bob has an id starting 1a2b", errNoBackupPrefix)
	if got := explain(err, c, "restore <backup>"); !strings.Contains(got, "--source-owner") {
		t.Errorf("a prefix of another owner's backup: %q, want the --source-owner hint", got)
	}
	c.Restore.SourceOwner = "alice"
	if got := explain(err, c, "restore <backup>"); strings.Contains(got, "hint") {
		t.Errorf("with --source-owner given: %q, want no hint", got)
	}
}

// TestHintForVerifyUnderTheWrongKey (issue 51): verify under the wrong key
// gets import's "wrong key?" hint: its error keeps the record's cause.
func TestHintForVerifyUnderTheWrongKey(t *testing.T) {
	err := incompleteError{&archive.RecordError{Record: 0, Err: archive.ErrAuthentication}}
	if got := explain(err, &cli{}, "verify <file>"); !strings.Contains(got, "the archive is not complete") || !strings.Contains(got, "wrong key?") {
		t.Errorf("verify under the wrong key: %q, want the wrong-key hint", got)
	}
	if got := explain(incompleteError{archive.ErrTruncated}, &cli{}, "verify <file>"); strings.Contains(got, "wrong key") {
		t.Errorf("a truncated archive: %q, want no wrong-key hint", got)
	}
}
