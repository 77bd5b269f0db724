package sqlstore

import "github.com/contentbackup/contentbackup/internal/store"

// The statements the server's periodic loops run across owners, named so
// that the tests that count their work (storetest.PeriodicQueries) run
// the very text: each reads in proportion to what is due, through an
// index led by what makes a row due, never the fleet (issue 52).
const (
	// OwnerKeysToRewrapCount counts the owner keys under each KEK but ?
	// (the current one): two ranges of owner_keys_by_kek either side of
	// it, rather than every owner's key.
	OwnerKeysToRewrapCount = `SELECT kek_fingerprint, count(*) FROM owner_keys WHERE (kek_fingerprint < ? OR kek_fingerprint > ?) AND wrapped_key <> ? GROUP BY kek_fingerprint`
	// OwnerKeysToRewrap is a page of them, in owner order. The form
	// kek_fingerprint <> ? walked every owner's key in owner order.
	OwnerKeysToRewrap = `SELECT ` + ownerKeyColumns + ` FROM owner_keys WHERE (kek_fingerprint < ? OR kek_fingerprint > ?) AND owner > ? ORDER BY owner LIMIT ?`
	// NextOwnerKeyKEK is the first fingerprint after ? that wraps an
	// owner key (NULL past the last): OwnerKeyKEKs' step, at start.
	NextOwnerKeyKEK = `SELECT min(kek_fingerprint) FROM owner_keys WHERE kek_fingerprint > ?`
	// LegacyBackupCount counts the backups a KEK wraps directly, on
	// backups_by_owner_key (owner_key_id '' first).
	LegacyBackupCount = `SELECT kek_fingerprint, count(*) FROM backups WHERE owner_key_id = '' AND wrapped_key <> ? GROUP BY kek_fingerprint`
	// FinishedJobsDue are the ended jobs past --keep-finished-jobs,
	// oldest first, on jobs_finished, whose predicate it writes as
	// constants so both planners can use it.
	FinishedJobsDue = `SELECT id FROM jobs WHERE state <> '` + store.JobRunning + `' AND kind <> '` + store.JobErase + `' AND done_ns > 0 AND done_ns < ? ORDER BY done_ns LIMIT ?`
	// LeaseRunOut is a running job whose server stopped renewing it, to
	// take over, on jobs_running.
	LeaseRunOut = `SELECT id, attempt FROM jobs WHERE state = ? AND lease_until_ns < ? AND attempt < ? ORDER BY id LIMIT 1`
	// LeasesPastAttempts are the ones to fail instead, on jobs_running.
	LeasesPastAttempts = `SELECT id FROM jobs WHERE state = ? AND lease_until_ns < ? AND attempt >= ?`
	// HistoryDue are the history files expired, on
	// history_files_by_expiry.
	HistoryDue = `SELECT ` + historyColumns + ` FROM history_files WHERE expires_ns <= ? ORDER BY expires_ns, id LIMIT ?`
)
