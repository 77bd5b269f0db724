// Package scratchdb makes a throwaway PostgreSQL database for the tools
// that run a server on one of their own (soak, fleetbench).
package scratchdb

import (
	"context"
	"crypto/rand"
	"net/url"
	"strings"

	"github.com/jackc/pgx/v5"
)

// New creates a database named prefix_<random> under admin (a URL that
// may create databases) and returns its URL and a function that drops it.
func New(ctx context.Context, admin, prefix string) (string, func(), error) {
	c, err := pgx.Connect(ctx, admin)
	if err != nil {
		return "", nil, err
	}
	name := prefix + "_" + strings.ToLower(rand.Text()[:10])
	if _, err := c.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		c.Close(ctx)
		return "", nil, err
	}
	u, err := url.Parse(admin)
	if err != nil {
		c.Close(ctx)
		return "", nil, err
	}
	u.Path = "/" + name
	return u.String(), func() {
		_, _ = c.Exec(context.WithoutCancel(ctx), "DROP DATABASE "+name+" WITH (FORCE)")
		c.Close(context.WithoutCancel(ctx))
	}, nil
}
