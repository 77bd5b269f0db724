// Package migrations holds the versioned schema of each SQL engine, embedded
// in the binary, and applies it with goose.
//
// One folder per dialect (postgres/, sqlite/), numbered files in each: a
// change to the schema is a new file in both, never an edit of an applied one.
package migrations

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"io/fs"

	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
)

//go:embed postgres/*.sql sqlite/*.sql
var files embed.FS

// Dialect names a folder of migrations and goose's SQL dialect for it.
type Dialect string

const (
	Postgres Dialect = "postgres"
	SQLite   Dialect = "sqlite"
)

// Up applies every migration db has not had yet and returns the schema
// version it is at afterwards. goose records applied versions in its own
// table and takes a lock on Postgres, so two servers starting at once do
// not both migrate.
func Up(ctx context.Context, db *sql.DB, d Dialect) (int64, error) {
	p, err := provider(db, d)
	if err != nil {
		return 0, err
	}
	if _, err := p.Up(ctx); err != nil {
		return 0, fmt.Errorf("migrate %s: %w", d, err)
	}
	v, err := p.GetDBVersion(ctx)
	if err != nil {
		return 0, fmt.Errorf("migrate %s: read version: %w", d, err)
	}
	return v, nil
}

// Status reports the schema version db is at and the newest one embedded.
func Status(ctx context.Context, db *sql.DB, d Dialect) (current, latest int64, err error) {
	p, err := provider(db, d)
	if err != nil {
		return 0, 0, err
	}
	if current, err = p.GetDBVersion(ctx); err != nil {
		return 0, 0, fmt.Errorf("migrate %s: read version: %w", d, err)
	}
	sources := p.ListSources()
	if len(sources) > 0 {
		latest = sources[len(sources)-1].Version
	}
	return current, latest, nil
}

func provider(db *sql.DB, d Dialect) (*goose.Provider, error) {
	var gd goose.Dialect
	switch d {
	case Postgres:
		gd = goose.DialectPostgres
	case SQLite:
		gd = goose.DialectSQLite3
	default:
		return nil, fmt.Errorf("migrate: unknown dialect %q", d)
	}
	sub, err := fs.Sub(files, string(d))
	if err != nil {
		return nil, fmt.Errorf("migrate %s: %w", d, err)
	}
	var opts []goose.ProviderOption
	if d == Postgres {
		locker, err := lock.NewPostgresSessionLocker()
		if err != nil {
			return nil, fmt.Errorf("migrate %s: %w", d, err)
		}
		opts = append(opts, goose.WithSessionLocker(locker))
	}
	p, err := goose.NewProvider(gd, db, sub, opts...)
	if err != nil {
		return nil, fmt.Errorf("migrate %s: %w", d, err)
	}
	return p, nil
}

// UpTo applies migrations up to and including version: for tests of an
// upgrade from an earlier schema.
func UpTo(ctx context.Context, db *sql.DB, d Dialect, version int64) error {
	p, err := provider(db, d)
	if err != nil {
		return err
	}
	if _, err := p.UpTo(ctx, version); err != nil {
		return fmt.Errorf("migrate %s to %d: %w", d, version, err)
	}
	return nil
}
