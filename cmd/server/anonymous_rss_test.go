package main

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"

	cb "github.com/contentbackup/contentbackup/api/contentbackup/v1"
)

// TestBinaryAnonymousTrafficRSS (issue 33): the built server's peak
// resident memory under anonymous traffic stays within 64 MiB of idle:
// 1,000 gzip requests of about 2 KB on gRPC and on HTTP/JSON (each a
// DecodeBatch of a million envelopes once expanded), then 500 connections
// each declaring a 40 MB body and sending nothing. Every one is refused.
// The figures go to RELIABILITY.md.
func TestBinaryAnonymousTrafficRSS(t *testing.T) {
	bin := buildServer(t)
	addr, logs, proc := startBinary(t, bin, "LISTEN_ADDR=127.0.0.1:0", "HTTP_LISTEN_ADDR=127.0.0.1:0", "METRICS_ADDR=", "LOG_FORMAT=json", "DATA_DIR="+t.TempDir())
	httpAddr := ""
	for deadline := time.Now().Add(10 * time.Second); httpAddr == "" && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		sc := bufio.NewScanner(strings.NewReader(logs()))
		for sc.Scan() {
			var e struct{ Msg, Addr string }
			if json.Unmarshal(sc.Bytes(), &e) == nil && strings.HasPrefix(e.Msg, "serving HTTP/JSON") {
				httpAddr = e.Addr
			}
		}
	}
	if httpAddr == "" {
		t.Fatalf("no HTTP/JSON listener logged:\n%s", logs())
	}
	status := func(field string) int64 {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", proc.Pid))
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.Fields(line); len(f) >= 2 && f[0] == field+":" {
				kb, _ := strconv.ParseInt(f[1], 10, 64)
				return kb << 10
			}
		}
		t.Fatalf("no %s in /proc/%d/status", field, proc.Pid)
		return 0
	}

	one := bytes.Repeat(protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), nil), 1<<20)
	var z bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&z, gzip.BestCompression)
	_, _ = zw.Write(one)
	_ = zw.Close()
	frame := append([]byte{1, 0, 0, 0, 0}, z.Bytes()...)
	binary.BigEndian.PutUint32(frame[1:], uint32(z.Len()))
	z.Reset()
	zw, _ = gzip.NewWriterLevel(&z, gzip.BestCompression)
	_, _ = zw.Write([]byte(`{"encodedContents":[` + strings.Repeat(`"",`, 1<<20) + `""]}`))
	_ = zw.Close()
	jsonBomb := z.Bytes()

	p := new(http.Protocols)
	p.SetUnencryptedHTTP2(true)
	h2c := &http.Client{Transport: &http.Transport{Protocols: p}}
	grpcCall := func() string {
		req, _ := http.NewRequest(http.MethodPost, "http://"+addr+cb.ContentService_DecodeBatch_FullMethodName, bytes.NewReader(frame))
		req.Header.Set("Content-Type", "application/grpc")
		req.Header.Set("Grpc-Encoding", "gzip")
		req.Header.Set("Te", "trailers")
		resp, err := h2c.Do(req)
		if err != nil {
			return err.Error()
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		if s := resp.Header.Get("Grpc-Status"); s != "" {
			return s
		}
		return resp.Trailer.Get("Grpc-Status")
	}
	httpCall := func() string {
		req, _ := http.NewRequest(http.MethodPost, "http://"+httpAddr+cb.ContentService_DecodeBatch_FullMethodName, bytes.NewReader(jsonBomb))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Content-Encoding", "gzip")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err.Error()
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		return strconv.Itoa(resp.StatusCode)
	}
	flood := func(name, want string, call func() string) {
		var wg sync.WaitGroup
		var mu sync.Mutex
		bad := 0
		for w := range 8 {
			wg.Go(func() {
				for i := w; i < 1000; i += 8 {
					if got := call(); got != want {
						mu.Lock()
						bad++
						mu.Unlock()
					}
				}
			})
		}
		wg.Wait()
		if bad > 0 {
			t.Errorf("%s: %d of 1000 anonymous requests not answered %s", name, bad, want)
		}
	}
	grpcCall()
	httpCall()
	time.Sleep(500 * time.Millisecond)
	idle := status("VmRSS")

	flood("gRPC gzip", "16", grpcCall)
	afterGRPC := status("VmHWM")
	flood("HTTP/JSON gzip", "401", httpCall)
	afterHTTP := status("VmHWM")

	var conns []net.Conn
	for range 500 {
		c, err := net.Dial("tcp", httpAddr)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", cb.ContentService_Decode_FullMethodName, 40<<20)
	}
	refused := 0
	for _, c := range conns {
		_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
		line, _ := bufio.NewReader(c).ReadString('\n')
		if strings.Contains(line, " 401 ") {
			refused++
		}
		c.Close()
	}
	if refused != 500 {
		t.Errorf("%d of 500 connections declaring 40 MB answered 401", refused)
	}
	afterDeclared := status("VmHWM")
	mib := func(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }
	t.Logf("RSS idle %s; peak after 1,000 gRPC gzip %s, after 1,000 HTTP gzip %s, after 500 declared 40 MB bodies %s",
		mib(idle), mib(afterGRPC), mib(afterHTTP), mib(afterDeclared))
	if peak := afterDeclared - idle; peak > 64<<20 {
		t.Errorf("anonymous traffic took the server %s past idle; want within 64 MiB", mib(peak))
	}
}
