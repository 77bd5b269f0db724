package sqlstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/contentbackup/contentbackup/internal/store"
)

const historyColumns = `id, object_key, state, size, created_ns, expires_ns, downloads`

func scanHistoryFile(scan func(...any) error) (store.HistoryFile, error) {
	var f store.HistoryFile
	var created, expires int64
	if err := scan(&f.ID, &f.ObjectKey, &f.State, &f.Size, &created, &expires, &f.Downloads); err != nil {
		return store.HistoryFile{}, err
	}
	f.Created, f.Expires = time.Unix(0, created), time.Unix(0, expires)
	return f, nil
}

func (s historySQL) CreateHistoryFile(ctx context.Context, f store.HistoryFile) error {
	_, err := s.exec(ctx, s.d.bind(`INSERT INTO history_files (`+historyColumns+`) VALUES (?, ?, ?, ?, ?, ?, 0)`),
		f.ID, f.ObjectKey, f.State, f.Size, f.Created.UnixNano(), f.Expires.UnixNano())
	if uniqueViolation(err) {
		return fmt.Errorf("history file exists: %w", store.ErrFailedPrecondition)
	}
	if err != nil {
		return fmt.Errorf("%s: create history file: %w", s.d.Name, err)
	}
	return nil
}

func (s historySQL) FinishHistoryFile(ctx context.Context, id string, size int64, expires time.Time) error {
	n, err := s.exec(ctx, s.d.bind(`UPDATE history_files SET state = ?, size = ?, expires_ns = ? WHERE id = ? AND state = ?`),
		store.HistoryReady, size, expires.UnixNano(), id, store.HistoryUploading)
	if err != nil {
		return fmt.Errorf("%s: finish history file: %w", s.d.Name, err)
	}
	if n == 0 {
		return fmt.Errorf("history file: %w", store.ErrNotFound)
	}
	return nil
}

func (s historySQL) GetHistoryFile(ctx context.Context, id string) (store.HistoryFile, error) {
	f, err := scanHistoryFile(s.db.Read().QueryRow(ctx, s.d.bind(`SELECT `+historyColumns+` FROM history_files WHERE id = ?`), id).Scan)
	if errors.Is(err, s.d.NoRows) {
		return store.HistoryFile{}, fmt.Errorf("history file: %w", store.ErrNotFound)
	}
	if err != nil {
		return store.HistoryFile{}, fmt.Errorf("%s: read history file: %w", s.d.Name, err)
	}
	return f, nil
}

func (s historySQL) CountHistoryDownload(ctx context.Context, id string) (int64, error) {
	var count int64
	err := s.db.Write(ctx, func(tx Conn) error {
		n, err := tx.Exec(ctx, s.d.bind(`UPDATE history_files SET downloads = downloads + 1 WHERE id = ? AND state = ?`), id, store.HistoryReady)
		if err != nil {
			return fmt.Errorf("%s: count a history download: %w", s.d.Name, err)
		}
		if n == 0 {
			return fmt.Errorf("history file: %w", store.ErrNotFound)
		}
		return tx.QueryRow(ctx, s.d.bind(`SELECT downloads FROM history_files WHERE id = ?`), id).Scan(&count)
	})
	return count, err
}

func (s historySQL) DeleteHistoryFile(ctx context.Context, id string) error {
	if _, err := s.exec(ctx, s.d.bind(`DELETE FROM history_files WHERE id = ?`), id); err != nil {
		return fmt.Errorf("%s: delete history file: %w", s.d.Name, err)
	}
	return nil
}

func (s historySQL) historyFiles(ctx context.Context, query string, args ...any) ([]store.HistoryFile, error) {
	var out []store.HistoryFile
	err := s.db.Read().Query(ctx, s.d.bind(query), args, func(rows Rows) error {
		for rows.Next() {
			f, err := scanHistoryFile(rows.Scan)
			if err != nil {
				return err
			}
			out = append(out, f)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("%s: list history files: %w", s.d.Name, err)
	}
	return out, nil
}

func (s historySQL) HistoryFilesBefore(ctx context.Context, t time.Time, limit int) ([]store.HistoryFile, error) {
	return s.historyFiles(ctx, HistoryDue, t.UnixNano(), limit)
}

func (s historySQL) EvictableHistoryFiles(ctx context.Context, createdBefore time.Time, limit int) ([]store.HistoryFile, error) {
	return s.historyFiles(ctx, `SELECT `+historyColumns+` FROM history_files WHERE state = ? AND created_ns < ? ORDER BY created_ns, id LIMIT ?`,
		store.HistoryReady, createdBefore.UnixNano(), limit)
}

// historyRoom is the key ReserveHistoryBytes locks: every reservation
// checks the same total.
const historyRoom = "history room"

func (s historySQL) ReserveHistoryBytes(ctx context.Context, id string, delta, maxTotal int64) error {
	return s.db.Write(ctx, func(tx Conn) error {
		if s.d.LockKey != "" {
			if _, err := tx.Exec(ctx, s.d.LockKey, historyRoom); err != nil {
				return fmt.Errorf("%s: lock the history room: %w", s.d.Name, err)
			}
		}
		// Only an upload running reserves: a finished or unknown file is
		// ErrNotFound whatever room there is.
		var state string
		err := tx.QueryRow(ctx, s.d.bind(`SELECT state FROM history_files WHERE id = ?`), id).Scan(&state)
		if errors.Is(err, s.d.NoRows) || err == nil && state != store.HistoryUploading {
			return fmt.Errorf("history upload %.8s…: %w", id, store.ErrNotFound)
		}
		if err != nil {
			return fmt.Errorf("%s: read the history upload: %w", s.d.Name, err)
		}
		var used int64
		if err := tx.QueryRow(ctx, `SELECT COALESCE(SUM(size), 0) FROM history_files`).Scan(&used); err != nil {
			return fmt.Errorf("%s: history bytes: %w", s.d.Name, err)
		}
		if used+delta > maxTotal {
			return fmt.Errorf("%d bytes stored or reserved, %d more asked, %d the most: %w", used, delta, maxTotal, store.ErrHistoryFull)
		}
		n, err := tx.Exec(ctx, s.d.bind(`UPDATE history_files SET size = size + ? WHERE id = ? AND state = ?`), delta, id, store.HistoryUploading)
		if err != nil {
			return fmt.Errorf("%s: reserve history bytes: %w", s.d.Name, err)
		}
		if n == 0 {
			return fmt.Errorf("history upload %.8s…: %w", id, store.ErrNotFound)
		}
		return nil
	})
}

func (s historySQL) HistoryBytes(ctx context.Context) (bytes, files int64, err error) {
	err = s.db.Read().QueryRow(ctx, `SELECT COALESCE(SUM(size), 0), count(*) FROM history_files`).Scan(&bytes, &files)
	if err != nil {
		return 0, 0, fmt.Errorf("%s: sum history files: %w", s.d.Name, err)
	}
	return bytes, files, nil
}
