package history

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/contentbackup/contentbackup/internal/store/enginetest"
)

// TestHistoryUnderAttack (issue 47): 100 anonymous clients, each from an
// address of its own, fill the server with whole uploads, trickle bodies
// and hang up half way, while 10 legitimate clients upload and download.
// Every legitimate upload is stored within a minute (retrying on 429, 503 and 507 as
// Retry-After says) and downloads whole at once; none of their files is
// gone before the minimum eviction age; the bucket's disk never goes
// below its reserve. HISTORY_SOAK (a duration) runs it longer than the
// default 6 s: make history-soak.
func TestHistoryUnderAttack(t *testing.T) {
	attack := 6 * time.Second
	if v := os.Getenv("HISTORY_SOAK"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("HISTORY_SOAK=%q: %v", v, err)
		}
		attack = d
	}
	const (
		capacity    = 96 << 20 // the bucket's disk, as FreeBytes reports it
		reserve     = 24 << 20
		minEvictAge = 2 * time.Second
		legitSize   = 256 << 10
	)
	var dir atomic.Pointer[string]
	used := func() int64 {
		var n int64
		if d := dir.Load(); d != nil {
			_ = filepath.WalkDir(*d, func(_ string, e fs.DirEntry, err error) error {
				if err == nil && !e.IsDir() {
					if info, err := e.Info(); err == nil {
						n += info.Size()
					}
				}
				return nil
			})
		}
		return n
	}
	f := newFixture(t, enginetest.SQLite(t), func(c *Config) {
		c.Now = time.Now
		c.MaxUpload, c.MaxTotal = 1<<20, 80<<20
		c.MinEvictAge = minEvictAge
		c.BodyGrace, c.Stall = 500*time.Millisecond, time.Second
		c.UploadsPerMinute, c.UploadBurst = 6000, 100
		c.FreeBytes = func() (uint64, error) { return uint64(max(capacity-used(), 0)), nil }
		c.DiskReserve = reserve
	})
	dir.Store(&f.dir)
	addr := strings.TrimPrefix(f.url, "http://")
	from := func(group, i int) *net.Dialer {
		return &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, byte(group), byte(i+1))}, Timeout: 5 * time.Second}
	}
	client := func(group, i int) *http.Client {
		return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DialContext: from(group, i).DialContext, MaxIdleConnsPerHost: 1}}
	}

	ctx, stop := context.WithTimeout(t.Context(), attack)
	defer stop()
	var minFree atomic.Int64
	minFree.Store(capacity)
	var wg sync.WaitGroup
	wg.Go(func() {
		for ctx.Err() == nil {
			if free := capacity - used(); free < minFree.Load() {
				minFree.Store(free)
			}
			time.Sleep(10 * time.Millisecond)
		}
	})

	// The attackers.
	var attackMu sync.Mutex
	attackStatus := map[string]int{}
	tally := func(what string) {
		attackMu.Lock()
		attackStatus[what]++
		attackMu.Unlock()
	}
	body := make([]byte, 1<<20)
	_, _ = rand.Read(body)
	for i := range 100 {
		wg.Go(func() {
			c := client(1, i)
			for ctx.Err() == nil {
				switch i % 3 {
				case 0: // fills: whole uploads at full speed
					resp, err := c.Post(f.url+"/upload", "", bytes.NewReader(body))
					if err != nil {
						tally("fill: " + errClass(err))
						continue
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					tally("fill: " + strconv.Itoa(resp.StatusCode))
					if resp.StatusCode != http.StatusOK {
						time.Sleep(20 * time.Millisecond)
					}
				case 1: // trickles a byte at a time
					conn, err := from(1, i).DialContext(ctx, "tcp", addr)
					if err != nil {
						continue
					}
					fmt.Fprintf(conn, "POST /upload HTTP/1.1\r\nHost: h\r\nContent-Length: %d\r\n\r\n", len(body))
					answered := make(chan string, 1)
					go func() {
						b := make([]byte, 64)
						n, _ := conn.Read(b)
						line, _, _ := strings.Cut(string(b[:n]), "\r\n")
						answered <- line
					}()
				trickle:
					for ctx.Err() == nil {
						select {
						case line := <-answered:
							tally("trickle: " + line)
							break trickle
						case <-time.After(200 * time.Millisecond):
							if _, err := conn.Write([]byte{1}); err != nil {
								tally("trickle: cut")
								break trickle
							}
						}
					}
					conn.Close()
				case 2: // sends a third and hangs up
					conn, err := from(1, i).DialContext(ctx, "tcp", addr)
					if err != nil {
						continue
					}
					fmt.Fprintf(conn, "POST /upload HTTP/1.1\r\nHost: h\r\nContent-Length: %d\r\n\r\n", len(body))
					_, _ = conn.Write(body[:len(body)/3])
					conn.Close()
					tally("hang up")
				}
			}
		})
	}

	// The legitimate clients.
	type stored struct {
		id   string
		data []byte
		at   time.Time
	}
	var legitMu sync.Mutex
	var files []stored
	var problems []string
	var retries, uploads int
	var slowest time.Duration
	problem := func(format string, args ...any) {
		legitMu.Lock()
		problems = append(problems, fmt.Sprintf(format, args...))
		legitMu.Unlock()
	}
	for i := range 10 {
		wg.Go(func() {
			c := client(2, i)
			for ctx.Err() == nil {
				data := make([]byte, legitSize)
				_, _ = rand.Read(data)
				start := time.Now()
				var id string
				for tries := 0; ; tries++ {
					if time.Since(start) > time.Minute {
						problem("client %d: an upload not stored in a minute (%d tries)", i, tries)
						return
					}
					resp, err := c.Post(f.url+"/upload", "", bytes.NewReader(data))
					if err != nil {
						problem("client %d: upload: %v", i, err)
						return
					}
					b, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					if resp.StatusCode == http.StatusOK {
						id = strings.TrimSpace(string(b))
						legitMu.Lock()
						retries += tries
						legitMu.Unlock()
						break
					}
					switch resp.StatusCode {
					case http.StatusTooManyRequests, http.StatusServiceUnavailable, http.StatusInsufficientStorage:
						wait, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
						time.Sleep(min(time.Duration(wait)*time.Second, 100*time.Millisecond))
					default:
						problem("client %d: upload answered %d: %s", i, resp.StatusCode, b)
						return
					}
				}
				at := time.Now()
				took := at.Sub(start)
				resp, err := c.Get(f.url + "/files/" + id)
				if err != nil {
					problem("client %d: download: %v", i, err)
					return
				}
				got, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if err != nil || resp.StatusCode != http.StatusOK || !bytes.Equal(got, data) {
					problem("client %d: its file %s read back %d, %d bytes, %v", i, id[:8], resp.StatusCode, len(got), err)
					return
				}
				legitMu.Lock()
				files = append(files, stored{id, data, at})
				uploads++
				slowest = max(slowest, took)
				legitMu.Unlock()
			}
		})
	}
	wg.Wait()

	// Every legitimate file younger than the minimum eviction age is
	// still there, whole.
	c := client(2, 0)
	young := 0
	for _, s := range files {
		if time.Since(s.at) >= minEvictAge-200*time.Millisecond {
			continue
		}
		young++
		resp, err := c.Get(f.url + "/files/" + s.id)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !bytes.Equal(got, s.data) {
			problem("file %s, %s old: %d, %d bytes; evicted before the minimum age", s.id[:8], time.Since(s.at).Round(time.Millisecond), resp.StatusCode, len(got))
		}
	}
	slices.Sort(problems)
	if len(problems) > 0 {
		t.Fatalf("%d problems, first: %s", len(problems), strings.Join(problems[:min(5, len(problems))], "; "))
	}
	if uploads < 10 {
		t.Fatalf("the legitimate clients stored %d files in %s", uploads, attack)
	}
	if minFree.Load() < reserve {
		t.Fatalf("the bucket's disk went down to %d bytes free, under its %d-byte reserve", minFree.Load(), reserve)
	}
	t.Logf("%s under 100 attackers (%v): 10 clients stored and read back %d files of %d KiB (%d retries, the slowest stored in %s); %d younger than %s all there; the disk's least free %d MiB (reserve %d MiB)",
		attack, attackStatus, uploads, legitSize>>10, retries, slowest.Round(time.Millisecond), young, minEvictAge, minFree.Load()>>20, reserve>>20)
}

// errClass names a client error without its addresses.
func errClass(err error) string {
	switch {
	case strings.Contains(err.Error(), "reset"):
		return "reset"
	case strings.Contains(err.Error(), "timeout"):
		return "timeout"
	case strings.Contains(err.Error(), "EOF"):
		return "closed"
	}
	return "error"
}
