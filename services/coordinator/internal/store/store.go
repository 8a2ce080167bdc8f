// Package store is the coordinator's Postgres state and the one place its SQL lives:
// the Kafka topic registry, producer-id blocks, consumer groups with their members and
// committed offsets (groups.go), and the Pub/Sub registry. The schema lives in
// migrations/ (embedded, applied with goose at start). Topic changes are serialized
// across coordinator replicas with session-level advisory locks (see LOCKS.md).
package store

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
	"go.uber.org/zap"
)

//go:embed migrations/*.sql
var migrations embed.FS

// ProducerIDBlockSize is how many producer ids one nextval of the producer_id_blocks
// sequence reserves; it equals the sequence's increment in migrations/00001_topics.sql.
const ProducerIDBlockSize = 1000

// Postgres SQLSTATE codes the store reacts to.
const (
	sqlstateInvalidCatalogName = "3D000" // database does not exist
	sqlstateDuplicateDatabase  = "42P04"
	sqlstateUniqueViolation    = "23505"
)

// Store wraps a pgx pool over the coordinator database.
type Store struct {
	pool     *pgxpool.Pool
	log      *zap.Logger
	migrated atomic.Bool
	// lastPrepareErr is the last Prepare failure, reported by Ready until Prepare
	// succeeds.
	lastPrepareErr atomic.Pointer[error]
}

// Open parses url and builds a connection pool. It does not connect: call Prepare
// (retrying while it fails) before serving.
func Open(url string, log *zap.Logger) (*Store, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("parse postgres url: %w", err)
	}
	if cfg.ConnConfig.Database == "" {
		return nil, errors.New("parse postgres url: no database named")
	}
	cfg.MaxConns = 16
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		return nil, fmt.Errorf("postgres pool: %w", err)
	}
	return &Store{pool: pool, log: log}, nil
}

// Close closes the pool.
func (s *Store) Close() { s.pool.Close() }

// Database is the name of the coordinator database.
func (s *Store) Database() string { return s.pool.Config().ConnConfig.Database }

// Prepare creates the database when it does not exist (connecting to the same server's
// "postgres" database) and applies the embedded migrations under goose's advisory lock,
// so concurrent replicas migrate once. After it succeeds the store is ready.
func (s *Store) Prepare(ctx context.Context) error {
	err := s.ensureDatabase(ctx)
	if err == nil {
		err = s.migrate(ctx)
	}
	if err != nil {
		s.lastPrepareErr.Store(&err)
		return err
	}
	s.migrated.Store(true)
	return nil
}

// Pool is the connection pool over the migrated database, for tests that set up or
// inspect rows directly. Coordinator code reads and writes through the typed methods
// of this package, which owns every SQL statement.
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

func (s *Store) ensureDatabase(ctx context.Context) error {
	cc := s.pool.Config().ConnConfig.Copy()
	conn, err := pgx.ConnectConfig(ctx, cc)
	if err == nil {
		return conn.Close(ctx)
	}
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != sqlstateInvalidCatalogName {
		return fmt.Errorf("connect: %w", err)
	}
	admin := s.pool.Config().ConnConfig.Copy()
	admin.Database = "postgres"
	aconn, err := pgx.ConnectConfig(ctx, admin)
	if err != nil {
		return fmt.Errorf("connect to database postgres to create %s: %w", cc.Database, err)
	}
	defer func() { _ = aconn.Close(context.WithoutCancel(ctx)) }()
	_, err = aconn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{cc.Database}.Sanitize())
	if err != nil && !(errors.As(err, &pgErr) && pgErr.Code == sqlstateDuplicateDatabase) {
		return fmt.Errorf("create database %s: %w", cc.Database, err)
	}
	s.log.Info("created database", zap.String("database", cc.Database))
	return nil
}

func (s *Store) migrate(ctx context.Context) error {
	locker, err := lock.NewPostgresSessionLocker(lock.WithLockTimeout(1, 300))
	if err != nil {
		return fmt.Errorf("migrations lock: %w", err)
	}
	fsys, err := fs.Sub(migrations, "migrations")
	if err != nil {
		return fmt.Errorf("migrations: %w", err)
	}
	db := stdlib.OpenDBFromPool(s.pool)
	defer func() { _ = db.Close() }()
	p, err := goose.NewProvider(goose.DialectPostgres, db, fsys,
		goose.WithSessionLocker(locker), goose.WithDisableGlobalRegistry(true))
	if err != nil {
		return fmt.Errorf("migrations: %w", err)
	}
	results, err := p.Up(ctx)
	if err != nil {
		return fmt.Errorf("apply migrations: %w", err)
	}
	for _, r := range results {
		s.log.Info("applied migration", zap.Int64("version", r.Source.Version), zap.String("file", r.Source.Path), zap.Duration("took", r.Duration))
	}
	return nil
}

// Ready reports whether the store can serve: migrated and Postgres answering a ping.
func (s *Store) Ready(ctx context.Context) error {
	if !s.migrated.Load() {
		if last := s.lastPrepareErr.Load(); last != nil {
			return fmt.Errorf("database %s: %w: %v", s.Database(), ErrNotReady, *last)
		}
		return fmt.Errorf("database %s: %w", s.Database(), ErrNotReady)
	}
	return s.pool.Ping(ctx)
}

func (s *Store) check() error {
	if !s.migrated.Load() {
		return ErrNotReady
	}
	return nil
}

// NextProducerIDBlock reserves ProducerIDBlockSize producer ids and returns the first.
// Blocks are never handed out twice (a Postgres sequence).
func (s *Store) NextProducerIDBlock(ctx context.Context) (int64, error) {
	if err := s.check(); err != nil {
		return 0, err
	}
	var first int64
	if err := s.pool.QueryRow(ctx, "SELECT nextval('producer_id_blocks')").Scan(&first); err != nil {
		return 0, fmt.Errorf("allocate producer id block: %w", err)
	}
	return first, nil
}

// unlockTimeout bounds the advisory unlock after the caller's context ended.
const unlockTimeout = 5 * time.Second
