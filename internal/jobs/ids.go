package jobs

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"time"
	"unicode"
	"unicode/utf8"
)

// The checks of what a caller names: ids and labels.

// NewID returns a job id that sorts by creation time: 16 hex digits of
// the time in nanoseconds, then 16 random ones.
func NewID(now time.Time) string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%016x%s", uint64(now.UnixNano()), hex.EncodeToString(b[:]))
}

func invalid(err error) error { return fmt.Errorf("%w: %w", ErrInvalid, err) }

// backupID matches a catalog id: NewID's form.
var backupID = regexp.MustCompile(`^[0-9a-f]{32}$`)

// CheckBackupID checks the form of a backup id a caller names.
func CheckBackupID(id string) error {
	if !backupID.MatchString(id) {
		return fmt.Errorf("backup %.40q: a backup id is 32 lowercase hex digits", id)
	}
	return nil
}

// maxLabel bounds a backup's label.
const maxLabel = 128

func checkLabel(label string) error {
	if len(label) > maxLabel || !utf8.ValidString(label) {
		return fmt.Errorf("label: %d bytes; at most %d bytes of UTF-8", len(label), maxLabel)
	}
	for _, r := range label {
		if unicode.IsControl(r) {
			return errors.New("label: control characters are not allowed")
		}
	}
	return nil
}
