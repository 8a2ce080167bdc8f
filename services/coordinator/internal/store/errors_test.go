package store

import (
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

func TestUnavailable(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{ErrNotReady, true},
		{fmt.Errorf("wrapped: %w", ErrNotReady), true},
		{errors.New("dial tcp: connection refused"), true},
		{&pgconn.PgError{Code: "57P01"}, true},                       // admin_shutdown
		{&pgconn.PgError{Code: "08006"}, true},                       // connection_failure
		{&pgconn.PgError{Code: "53300"}, true},                       // too_many_connections
		{fmt.Errorf("q: %w", &pgconn.PgError{Code: "42601"}), false}, // syntax error: a bug
		{&pgconn.PgError{Code: "23505"}, false},
	} {
		if got := Unavailable(tc.err); got != tc.want {
			t.Errorf("Unavailable(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

func TestCollisionKey(t *testing.T) {
	if CollisionKey("a.b_c") != CollisionKey("a_b.c") || CollisionKey("ab") == CollisionKey("a_b") {
		t.Fatal("collision keys do not follow Kafka's . vs _ rule")
	}
}
