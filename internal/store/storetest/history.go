package storetest

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
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
	// Evictable: ready, and created before the minimum age's cut; never
	// an upload running ("b"), never a file younger ("c").
	young := store.HistoryFile{ID: "c", ObjectKey: "history/c", State: store.HistoryUploading, Created: at.Add(2 * time.Minute), Expires: at.Add(time.Hour)}
	if err := s.CreateHistoryFile(ctx(t), young); err != nil {
		t.Fatal(err)
	}
	if err := s.FinishHistoryFile(ctx(t), "c", 0, finishExpires); err != nil {
		t.Fatal(err)
	}
	if old, err := s.EvictableHistoryFiles(ctx(t), at.Add(2*time.Minute), 10); err != nil || len(old) != 1 || old[0].ID != "a" {
		t.Fatalf("EvictableHistoryFiles: %+v, %v", old, err)
	}
	if err := s.DeleteHistoryFile(ctx(t), "c"); err != nil {
		t.Fatal(err)
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

// testHistoryReservations (issue 47, finding 8): a reservation is checked
// against the total and claimed in one transaction, so reservations
// racing for the last room never together pass the total; only an
// upload running can reserve.
func testHistoryReservations(t *testing.T, s store.Store) {
	at := time.Unix(0, 1_800_000_000_000_000_000)
	const total, uploads, step = 1000, 8, 100
	for i := range uploads {
		f := store.HistoryFile{ID: fmt.Sprintf("u%d", i), ObjectKey: fmt.Sprintf("history/u%d", i), State: store.HistoryUploading, Created: at, Expires: at.Add(time.Hour)}
		if err := s.CreateHistoryFile(ctx(t), f); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	var granted atomic.Int64
	for i := range uploads {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 5 {
				err := s.ReserveHistoryBytes(ctx(t), fmt.Sprintf("u%d", i), step, total)
				switch {
				case err == nil:
					granted.Add(step)
				case !errors.Is(err, store.ErrHistoryFull):
					t.Errorf("a reservation: %v", err)
				}
			}
		}()
	}
	wg.Wait()
	used, _, err := s.HistoryBytes(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if used != granted.Load() || used != total {
		t.Errorf("%d bytes reserved, %d granted; want the total, %d, exactly", used, granted.Load(), total)
	}
	if err := s.FinishHistoryFile(ctx(t), "u0", 10, at.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := s.ReserveHistoryBytes(ctx(t), "u0", 1, total); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("a reservation for a finished file: %v, want ErrNotFound", err)
	}
}
