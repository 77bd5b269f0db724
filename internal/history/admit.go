package history

import (
	"crypto/rand"
	"encoding/hex"
	"net"
	"net/http"
	"strings"
	"time"

	"golang.org/x/time/rate"
)

// clientLocked is addr's entry, made when it has none (s.mu held).
func (s *Service) clientLocked(addr string, now time.Time) *client {
	c, ok := s.clients[addr]
	if !ok {
		if len(s.clients) >= maxClients {
			s.pruneLocked(now)
		}
		c = &client{limiter: rate.NewLimiter(rate.Limit(s.cfg.UploadsPerMinute/60), s.cfg.UploadBurst)}
		s.clients[addr] = c
	}
	c.seen = now
	return c
}

// admitDownload takes a place for a download to addr: its own downloads
// at once, then everyone's (issue 47: every slot an anonymous client can
// hold is bounded per address). release gives it back.
func (s *Service) admitDownload(addr string) (release func(), code int, reason string) {
	now := s.cfg.Now()
	s.mu.Lock()
	c := s.clientLocked(addr, now)
	if c.downloads >= s.cfg.DownloadsPerClient {
		s.mu.Unlock()
		return nil, http.StatusTooManyRequests, RefusedClient
	}
	c.downloads++
	s.mu.Unlock()
	done := func() {
		s.mu.Lock()
		c.downloads--
		s.mu.Unlock()
	}
	select {
	case s.downloadsAtOnce <- struct{}{}:
	default:
		done()
		return nil, http.StatusServiceUnavailable, RefusedBusy
	}
	return func() { <-s.downloadsAtOnce; done() }, 0, ""
}

// admit takes a place for an upload from addr: the client's rate, its
// uploads at once, then everyone's. release gives it back.
func (s *Service) admit(addr string) (release func(), code int, reason string) {
	now := s.cfg.Now()
	s.mu.Lock()
	c := s.clientLocked(addr, now)
	if c.active >= s.cfg.UploadsPerClient {
		s.mu.Unlock()
		return nil, http.StatusTooManyRequests, RefusedClient
	}
	if !c.limiter.AllowN(now, 1) {
		s.mu.Unlock()
		return nil, http.StatusTooManyRequests, RefusedRate
	}
	c.active++
	s.mu.Unlock()
	done := func() {
		s.mu.Lock()
		c.active--
		s.mu.Unlock()
	}
	select {
	case s.atOnce <- struct{}{}:
	default:
		done()
		return nil, http.StatusServiceUnavailable, RefusedBusy
	}
	return func() { <-s.atOnce; done() }, 0, ""
}

// pruneLocked drops the limiters of clients idle long enough that their
// bucket is full again, and, if that frees too little, the idlest half.
func (s *Service) pruneLocked(now time.Time) {
	full := time.Duration(float64(s.cfg.UploadBurst) / s.cfg.UploadsPerMinute * float64(time.Minute))
	for addr, c := range s.clients {
		if c.active == 0 && c.downloads == 0 && now.Sub(c.seen) > full {
			delete(s.clients, addr)
		}
	}
	if len(s.clients) < maxClients {
		return
	}
	for addr, c := range s.clients {
		if c.active == 0 && c.downloads == 0 && len(s.clients) >= maxClients/2 {
			delete(s.clients, addr)
		}
	}
}

// clientAddr is the request's peer address without its port: the unit of
// the per-client limits. A proxy in front must keep the peer's address
// (PROXY protocol, or the limits apply to the proxy).
func clientAddr(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// newID is a fresh id: 160 random bits as 40 hex digits.
func newID() string {
	var b [idBytes]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// validID reports an id of the form newID makes.
func validID(id string) bool {
	if len(id) != 2*idBytes {
		return false
	}
	_, err := hex.DecodeString(id)
	return err == nil && strings.ToLower(id) == id
}

// short is an id as logs show it: enough to correlate, never to fetch.
func short(id string) string { return id[:8] + "…" }
