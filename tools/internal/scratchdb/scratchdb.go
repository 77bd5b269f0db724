// Package scratchdb makes a throwaway PostgreSQL database for the tools
// that run a server on one of their own (soak, fleetbench), on a single
// server or on a Citus cluster.
package scratchdb

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"

	"github.com/jackc/pgx/v5"
)

// New creates a database named prefix_<random> under admin (a URL that
// may create databases) and returns its URL and a function that drops it.
// With workers (host:port of each Citus worker, admin naming the
// coordinator), the database is made on every node with the citus
// extension and the workers registered, so the server distributes its
// tables when it migrates (as storetest does for make citus).
func New(ctx context.Context, admin, prefix string, workers ...string) (string, func(), error) {
	u, err := url.Parse(admin)
	if err != nil {
		return "", nil, err
	}
	name := prefix + "_" + strings.ToLower(rand.Text()[:10])
	nodes := []*url.URL{u}
	for _, w := range workers {
		n := *u
		n.Host = w
		nodes = append(nodes, &n)
	}
	var drops []func()
	drop := func() {
		for i := len(drops) - 1; i >= 0; i-- {
			drops[i]()
		}
	}
	for _, n := range nodes {
		d, err := create(ctx, n.String(), name, len(workers) > 0)
		if err != nil {
			drop()
			return "", nil, err
		}
		drops = append(drops, d)
	}
	out := *u
	out.Path = "/" + name
	if len(workers) > 0 {
		if err := register(ctx, out.String(), u.Host, workers); err != nil {
			drop()
			return "", nil, err
		}
	}
	return out.String(), drop, nil
}

// create makes the database name on the server admin names, with the
// citus extension in it when citus is set.
func create(ctx context.Context, admin, name string, citus bool) (func(), error) {
	c, err := pgx.Connect(ctx, admin)
	if err != nil {
		return nil, err
	}
	if _, err := c.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		c.Close(ctx)
		return nil, err
	}
	dropIt := func() {
		_, _ = c.Exec(context.WithoutCancel(ctx), "DROP DATABASE "+name+" WITH (FORCE)")
		c.Close(context.WithoutCancel(ctx))
	}
	if !citus {
		return dropIt, nil
	}
	u, _ := url.Parse(admin)
	u.Path = "/" + name
	db, err := pgx.Connect(ctx, u.String())
	if err != nil {
		dropIt()
		return nil, err
	}
	defer db.Close(ctx)
	if _, err := db.Exec(ctx, "CREATE EXTENSION citus"); err != nil {
		dropIt()
		return nil, fmt.Errorf("citus on %s: %w", u.Host, err)
	}
	return dropIt, nil
}

// register names the coordinator and adds each worker, from the new
// database on the coordinator.
func register(ctx context.Context, db, coordinator string, workers []string) error {
	c, err := pgx.Connect(ctx, db)
	if err != nil {
		return err
	}
	defer c.Close(ctx)
	host, port, err := net.SplitHostPort(coordinator)
	if err != nil {
		return err
	}
	if _, err := c.Exec(ctx, "SELECT citus_set_coordinator_host($1, $2::int)", host, port); err != nil {
		return err
	}
	for _, w := range workers {
		host, port, err := net.SplitHostPort(w)
		if err != nil {
			return errors.New("a worker is host:port: " + w)
		}
		if _, err := c.Exec(ctx, "SELECT citus_add_node($1, $2::int)", host, port); err != nil {
			return fmt.Errorf("citus_add_node %s: %w", w, err)
		}
	}
	return nil
}
