package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/contentbackup/contentbackup/internal/store"
)

// testHistoryFiles: the history server's catalog: an upload is recorded
// uploading (counted at its declared size), finished ready with its size,
// counted when downloaded (only when ready), listed by deadline and by
// age, summed, and deleted.
func testHistoryFiles(t *testing.T, s store.Store) {
	at := time.Unix(0, 1_800_000_000_000_000_000)
	files := []store.HistoryFile{
		{ID: "a", ObjectKey: "history/a", State: store.HistoryUploading, Size: 100, Created: at, Expires: at.Add(time.Hour)},
		{ID: "b", ObjectKey: "history/b", State: store.HistoryUploading, Size: 50, Created: at.Add(time.Minute), Expires: at.Add(2 * time.Hour)},
	}
	for _, f := range files {
		if err := s.CreateHistoryFile(ctx(t), f); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.CreateHistoryFile(ctx(t), files[0]); !errors.Is(err, store.ErrFailedPrecondition) {
		t.Fatalf("an id used twice: %v", err)
	}
	if _, err := s.CountHistoryDownload(ctx(t), "a"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a download of an upload still running: %v", err)
	}
	// Finished, a file takes its retention's deadline in place of its
	// body's.
	finishExpires := at.Add(7 * 24 * time.Hour)
	if err := s.FinishHistoryFile(ctx(t), "a", 70, finishExpires); err != nil {
		t.Fatal(err)
	}
	if err := s.FinishHistoryFile(ctx(t), "a", 70, finishExpires); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("finishing twice: %v", err)
	}
	got, err := s.GetHistoryFile(ctx(t), "a")
	if err != nil || got.State != store.HistoryReady || got.Size != 70 || got.ObjectKey != "history/a" || !got.Expires.Equal(finishExpires) {
		t.Fatalf("GetHistoryFile: %+v, %v", got, err)
	}
	for want := int64(1); want <= 2; want++ {
		if n, err := s.CountHistoryDownload(ctx(t), "a"); err != nil || n != want {
			t.Fatalf("download %d counted %d, %v", want, n, err)
		}
	}
	if used, n, err := s.HistoryBytes(ctx(t)); err != nil || used != 120 || n != 2 {
		t.Fatalf("HistoryBytes: %d bytes in %d files, %v; want 120 in 2", used, n, err)
	}
	// An upload whose body's deadline passed is due (a dead upload's
	// reservation is released); a finished file is not before its own.
	if due, err := s.HistoryFilesBefore(ctx(t), at.Add(2*time.Hour), 10); err != nil || len(due) != 1 || due[0].ID != "b" {
		t.Fatalf("HistoryFilesBefore: %+v, %v", due, err)
	}
	if oldest, err := s.OldestHistoryFiles(ctx(t), 1); err != nil || len(oldest) != 1 || oldest[0].ID != "a" {
		t.Fatalf("OldestHistoryFiles: %+v, %v", oldest, err)
	}
	if err := s.DeleteHistoryFile(ctx(t), "a"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteHistoryFile(ctx(t), "a"); err != nil {
		t.Fatalf("deleting a missing file: %v", err)
	}
	if _, err := s.GetHistoryFile(ctx(t), "a"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a deleted file: %v", err)
	}
}
