package postgres_test

import (
	"testing"

	"github.com/contentbackup/contentbackup/internal/store/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, storetest.Postgres)
}
