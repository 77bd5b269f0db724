package expiry

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/contentbackup/contentbackup/internal/store"
	"github.com/contentbackup/contentbackup/internal/store/enginetest"
	"github.com/contentbackup/contentbackup/internal/store/storetest"
)

// expiredOwners stores owners × per expired messages.
func expiredOwners(st store.Store, owners, per int) error {
	past := time.Now().Add(-time.Hour).UnixNano()
	known := true
	for o := range owners {
		owner := fmt.Sprintf("purge-%03d", o)
		g := storetest.FullGroup("g")
		if _, err := st.PutGroup(context.Background(), owner, g); err != nil {
			return err
		}
		msgs := storetest.Messages("m", g.GetId(), per, 1000)
		for _, m := range msgs {
			m.ExpiresAtNs, m.ExpiryKnown = &past, &known
		}
		if _, err := st.AppendMessages(context.Background(), owner, msgs, store.AppendOptions{}); err != nil {
			return err
		}
	}
	return nil
}

// BenchmarkPurge: messages the purge deletes a second, 20 owners of 500
// expired messages each, batches of 1,000 per owner.
func BenchmarkPurge(b *testing.B) {
	for _, e := range enginetest.Engines() {
		b.Run(e.Name, func(b *testing.B) {
			st := e.Open(b)
			var deleted int64
			var took time.Duration
			for b.Loop() {
				b.StopTimer()
				if err := expiredOwners(st, 20, 500); err != nil {
					b.Fatal(err)
				}
				w := New(Config{Store: st})
				b.StartTimer()
				start := time.Now()
				n, err := w.RunOnce(context.Background(), time.Now())
				took += time.Since(start)
				if err != nil || n != 10_000 {
					b.Fatalf("purged %d, %v", n, err)
				}
				deleted += n
			}
			b.ReportMetric(float64(deleted)/took.Seconds(), "msgs/s")
		})
	}
}

// BenchmarkAppendWhilePurging: AppendMessages of 100 messages, alone and
// while a purge deletes other owners' expired messages without pause: the
// ratio of the two is the purge's cost to writers.
func BenchmarkAppendWhilePurging(b *testing.B) {
	for _, e := range enginetest.Engines() {
		for _, purging := range []bool{false, true} {
			b.Run(fmt.Sprintf("%s/purging=%v", e.Name, purging), func(b *testing.B) {
				st := e.Open(b)
				g := storetest.FullGroup("g")
				if _, err := st.PutGroup(context.Background(), "writer", g); err != nil {
					b.Fatal(err)
				}
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				done := make(chan struct{})
				if purging {
					go func() {
						defer close(done)
						w := New(Config{Store: st, MaxPerRun: 2000})
						for ctx.Err() == nil {
							if expiredOwners(st, 4, 500) != nil {
								return
							}
							_, _ = w.RunOnce(ctx, time.Now())
						}
					}()
				} else {
					close(done)
				}
				i := 0
				for b.Loop() {
					msgs := storetest.Messages(fmt.Sprintf("w%d", i), g.GetId(), 100, int64(i*100))
					i++
					if _, err := st.AppendMessages(context.Background(), "writer", msgs, store.AppendOptions{}); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(b.N*100)/b.Elapsed().Seconds(), "msgs/s")
				cancel()
				<-done
			})
		}
	}
}
