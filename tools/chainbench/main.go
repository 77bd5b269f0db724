// Command chainbench measures what an incremental backup saves: it fills a
// Postgres owner with messages of 1 KiB (by COPY), takes a full backup
// job to a file bucket, then, each round, appends a share of new messages
// through the store's own append (stamped with the change sequence as any
// write is) and times an increment of the newest backup beside a full
// backup of the same owner at the same moment. It reports each
// increment's time and bytes as a fraction of the full's. Run by
// `make bench-chain`; figures go to BENCHMARKS.md.
package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/protobuf/proto"

	pv "github.com/contentbackup/contentbackup/api/contentbackup/persistence/v1"
	gb "github.com/contentbackup/contentbackup/api/xmtp/device_sync/group_backup"
	mb "github.com/contentbackup/contentbackup/api/xmtp/device_sync/message_backup"
	"github.com/contentbackup/contentbackup/internal/archive"
	"github.com/contentbackup/contentbackup/internal/backup"
	"github.com/contentbackup/contentbackup/internal/budget"
	"github.com/contentbackup/contentbackup/internal/jobs"
	"github.com/contentbackup/contentbackup/internal/keyring"
	"github.com/contentbackup/contentbackup/internal/store"
	"github.com/contentbackup/contentbackup/internal/store/postgres"
	"github.com/contentbackup/contentbackup/tools/internal/benchrows"
)

func main() {
	dbURL := flag.String("database-url", os.Getenv("DATABASE_URL"), "Postgres URL of an empty database")
	n := flag.Int("messages", 1_000_000, "messages of the owner before the first round")
	share := flag.Float64("share", 0.01, "new messages each round, as a share of --messages")
	rounds := flag.Int("rounds", 3, "rounds of append, increment and full")
	restores := flag.Int("restores", 0, "then, this many times each, alternated: restore the newest increment (its whole chain) and the last full backup, each into an empty owner")
	flag.Parse()
	if err := run(*dbURL, *n, *share, *rounds, *restores); err != nil {
		fmt.Fprintln(os.Stderr, "chainbench:", err)
		os.Exit(1)
	}
}

type result struct {
	messages uint64
	bytes    uint64
	took     time.Duration
	id       string
}

func run(dbURL string, n int, share float64, rounds, restores int) error {
	if dbURL == "" {
		return errors.New("--database-url (or DATABASE_URL) is required")
	}
	ctx := context.Background()
	st, err := postgres.Open(ctx, dbURL, postgres.Options{Migrate: true})
	if err != nil {
		return err
	}
	defer st.Close()
	kek, err := keyring.Open(ctx, "base64key://"+base64.URLEncoding.EncodeToString(bytes.Repeat([]byte{9}, 32)), "")
	if err != nil {
		return err
	}
	defer kek.Close()
	dir, err := os.MkdirTemp("", "chainbench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	buckets := jobs.NewBuckets(map[string]string{"local": "file://" + dir + "?no_tmp_dir=1&metadata=skip"})
	defer buckets.Close()
	m := jobs.New(jobs.Config{Store: st, KEK: kek, Buckets: buckets, Pool: budget.NewPool(1 << 30),
		Import: backup.ImportOptions{ReadAheadBytes: 64 << 20, Reader: archive.ReaderOptions{MaxRecordSize: 17 << 20, MaxWindow: 8 << 20}},
		Lease:  time.Minute, Renew: 10 * time.Second})
	defer m.Runner.Close(ctx)

	owner := fmt.Sprintf("chainbench-%d", time.Now().UnixNano())
	group := []byte(owner)[:16]
	body := benchrows.Content()
	if _, err := st.PutGroup(ctx, owner, &gb.GroupSave{Id: group, MembershipState: gb.GroupMembershipStateSave_GROUP_MEMBERSHIP_STATE_SAVE_ALLOWED,
		ConversationType: gb.ConversationTypeSave_CONVERSATION_TYPE_SAVE_GROUP}); err != nil {
		return err
	}
	start := time.Now()
	if got, err := st.Pool().CopyFrom(ctx, pgx.Identifier{"messages"}, benchrows.CopyColumns, &benchrows.Rows{Owner: owner, Group: group, Body: body, N: n}); err != nil || int(got) != n {
		return fmt.Errorf("copy from: %d rows, %v", got, err)
	}
	fmt.Printf("filled %d messages of 1 KiB in %s\n", n, time.Since(start).Round(time.Millisecond))
	if _, err := st.Pool().Exec(ctx, "VACUUM ANALYZE messages"); err != nil {
		return err
	}
	base, err := export(ctx, m, owner, "")
	if err != nil {
		return err
	}
	fmt.Printf("full backup: %d messages, %d bytes, %s\n\n", base.messages, base.bytes, base.took.Round(time.Millisecond))
	fmt.Println("| round | new messages | increment | full | time ratio | bytes ratio |")
	fmt.Println("|---|---|---|---|---|---|")
	next, add := n+1, int(float64(n)*share)
	var last result // the newest full backup
	for r := 1; r <= rounds; r++ {
		for done := 0; done < add; {
			batch := make([]*mb.GroupMessageSave, 0, 1000)
			for ; len(batch) < 1000 && done < add; done++ {
				batch = append(batch, benchrows.Message(next, group, body))
				next++
			}
			if _, err := st.AppendMessages(ctx, owner, batch, store.AppendOptions{MostlyNew: true}); err != nil {
				return err
			}
		}
		if _, err := st.Pool().Exec(ctx, "VACUUM ANALYZE messages"); err != nil {
			return err
		}
		inc, err := export(ctx, m, owner, base.id)
		if err != nil {
			return err
		}
		full, err := export(ctx, m, owner, "")
		if err != nil {
			return err
		}
		if inc.messages != uint64(add) {
			return fmt.Errorf("round %d: the increment holds %d messages, want the %d new", r, inc.messages, add)
		}
		fmt.Printf("| %d | %d | %s, %d B | %s (%d msgs), %d B | %.4f | %.4f |\n", r, add,
			inc.took.Round(time.Millisecond), inc.bytes, full.took.Round(time.Millisecond), full.messages, full.bytes,
			inc.took.Seconds()/full.took.Seconds(), float64(inc.bytes)/float64(full.bytes))
		base = inc
		last = full
	}
	if restores == 0 {
		return nil
	}
	fmt.Printf("\n| restore | chain of %d (full + %d increments) | one full backup | chain / full |\n|---|---|---|---|\n", rounds+1, rounds)
	var chainSum, fullSum time.Duration
	for i := 1; i <= restores; i++ {
		chain, err := restore(ctx, m, owner, base.id)
		if err != nil {
			return err
		}
		one, err := restore(ctx, m, owner, last.id)
		if err != nil {
			return err
		}
		if chain.messages != one.messages {
			return fmt.Errorf("the chain restored %d messages, the full %d", chain.messages, one.messages)
		}
		chainSum, fullSum = chainSum+chain.took, fullSum+one.took
		fmt.Printf("| %d | %s (%d msgs) | %s | %.3f |\n", i, chain.took.Round(time.Millisecond), chain.messages, one.took.Round(time.Millisecond), chain.took.Seconds()/one.took.Seconds())
	}
	fmt.Printf("| mean | %s | %s | %.3f |\n", (chainSum / time.Duration(restores)).Round(time.Millisecond), (fullSum / time.Duration(restores)).Round(time.Millisecond), chainSum.Seconds()/fullSum.Seconds())
	return nil
}

// export runs one export job to its end: an increment of since, or a full
// backup when since is "".
func export(ctx context.Context, m *jobs.Manager, owner, since string) (result, error) {
	start := time.Now()
	j, err := m.StartExport(ctx, "chainbench", jobs.ExportRequest{Owner: owner, Since: since})
	if j, err = ended(ctx, m, j, err); err != nil {
		return result{}, fmt.Errorf("export since %q: %w", since, err)
	}
	took := time.Since(start)
	r := &pv.ExportJobResult{}
	if err := proto.Unmarshal(j.Result, r); err != nil {
		return result{}, err
	}
	return result{messages: r.GetSummary().GetMessages(), bytes: r.GetSummary().GetArchiveBytes(), took: took, id: r.GetBackup()}, nil
}

// restore runs one import job of backup id into a new, empty owner and
// reports what it inserted and how long it took.
func restore(ctx context.Context, m *jobs.Manager, source, id string) (result, error) {
	start := time.Now()
	j, err := m.StartImport(ctx, "chainbench", jobs.ImportRequest{Owner: fmt.Sprintf("%s-restore-%d", source, time.Now().UnixNano()), SourceOwner: source, Backup: id})
	if j, err = ended(ctx, m, j, err); err != nil {
		return result{}, fmt.Errorf("restore of %s: %w", id, err)
	}
	took := time.Since(start)
	r := &pv.ImportJobResult{}
	if err := proto.Unmarshal(j.Result, r); err != nil {
		return result{}, err
	}
	return result{messages: r.GetCounts().GetMessages().GetInserted(), took: took, id: id}, nil
}

// ended waits for a job that started (err nil) to end, and fails unless
// it succeeded.
func ended(ctx context.Context, m *jobs.Manager, j store.Job, err error) (store.Job, error) {
	if err != nil {
		return j, err
	}
	if j, err = m.Runner.Wait(ctx, j.ID, 20*time.Millisecond); err != nil {
		return j, err
	}
	if j.State != store.JobSucceeded {
		return j, fmt.Errorf("%s: %s", j.State, j.ErrorMessage)
	}
	return j, nil
}
