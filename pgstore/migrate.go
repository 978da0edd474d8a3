package pgstore

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"strings"

	"github.com/jackc/pgx/v5"
)

// The migrations, in order: migrations/NNN_name.sql is schema version NNN.
// Each holds {{schema}} where the store's schema goes.
//
//go:embed migrations/*.sql
var migrationFiles embed.FS

// ErrSchemaNewer is returned by Migrate, and by Open, when the database's
// schema was migrated by a newer sluice than this one: this binary does
// not know its tables and would decide on them wrongly.
var ErrSchemaNewer = errors.New("pgstore: the database's sluice schema is newer than this binary")

// SchemaVersion is the schema version this package migrates to.
var SchemaVersion = len(migrations())

func migrations() []string {
	names, err := fs.Glob(migrationFiles, "migrations/*.sql")
	if err != nil {
		panic(err)
	}
	out := make([]string, len(names))
	for i, n := range names {
		b, err := migrationFiles.ReadFile(n)
		if err != nil {
			panic(err)
		}
		out[i] = string(b)
	}
	return out
}

// Migrate brings the store's schema to SchemaVersion: it creates the
// schema and applies the migrations it has not had, each in the one
// transaction that records it, under an advisory lock so that processes
// starting together apply each once. It refuses a schema newer than
// SchemaVersion with ErrSchemaNewer, changing nothing.
func (s *Store) Migrate(ctx context.Context) error {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("pgstore: migrate: %w", err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(hashtext('sluice migrate ' || $1))", s.schemaName); err != nil {
		return fmt.Errorf("pgstore: migrate: %w", err)
	}
	if _, err := tx.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+s.schema+";"+
		"CREATE TABLE IF NOT EXISTS "+s.schema+".schema_version (version int PRIMARY KEY, applied timestamptz NOT NULL DEFAULT now())"); err != nil {
		return fmt.Errorf("pgstore: migrate: %w", err)
	}
	have, err := version(ctx, tx, s.schema)
	if err != nil {
		return err
	}
	if have > SchemaVersion {
		return fmt.Errorf("%w: schema %s is at version %d, this binary knows up to %d", ErrSchemaNewer, s.schemaName, have, SchemaVersion)
	}
	for v, sql := range migrations()[have:] {
		v += have + 1
		if _, err := tx.Exec(ctx, strings.ReplaceAll(sql, "{{schema}}", s.schema)); err != nil {
			return fmt.Errorf("pgstore: migration %d: %w", v, err)
		}
		if _, err := tx.Exec(ctx, "INSERT INTO "+s.schema+".schema_version (version) VALUES ($1)", v); err != nil {
			return fmt.Errorf("pgstore: migration %d: %w", v, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("pgstore: migrate: %w", err)
	}
	return nil
}

// Version returns the schema version of the store's schema in the
// database: 0 when it has none.
func (s *Store) Version(ctx context.Context) (int, error) {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return 0, fmt.Errorf("pgstore: %w", err)
	}
	defer conn.Release()
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", s.schema+".schema_version").Scan(&exists); err != nil {
		return 0, fmt.Errorf("pgstore: %w", err)
	}
	if !exists {
		return 0, nil
	}
	return version(ctx, conn, s.schema)
}

type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

func version(ctx context.Context, q querier, schema string) (int, error) {
	var v int
	if err := q.QueryRow(ctx, "SELECT coalesce(max(version), 0) FROM "+schema+".schema_version").Scan(&v); err != nil {
		return 0, fmt.Errorf("pgstore: schema version: %w", err)
	}
	return v, nil
}
