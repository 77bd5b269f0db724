package server

import (
	"bytes"
	"encoding/base64"
	"io"
	"net"
	"net/http"
	"testing"

	"go.uber.org/zap"

	cb "github.com/contentbackup/contentbackup/api/contentbackup/v1"
	"github.com/contentbackup/contentbackup/internal/transport"
)

// BenchmarkGRPCDecodeText200ViaServeHTTP is BenchmarkGRPCDecodeText200
// with the server behind net/http's HTTP/2 (grpc.Server.ServeHTTP), which
// is what sharing one port between gRPC and HTTP/JSON would put every
// native call through: the benchmark that decided on a second listener.
func BenchmarkGRPCDecodeText200ViaServeHTTP(b *testing.B) {
	srv := New(Config{Auth: adminPolicy(b)}, zap.NewNop())
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	protocols := new(http.Protocols)
	protocols.SetUnencryptedHTTP2(true)
	hs := &http.Server{Handler: srv.GRPC(), Protocols: protocols}
	go hs.Serve(lis)
	b.Cleanup(func() { hs.Close() })
	benchDecodeText200(b, cb.NewContentServiceClient(dial(b, lis.Addr().String(), transport.ClientOptions{Insecure: true, Token: testAdminToken})))
}

// BenchmarkHTTPJSONDecodeText200 is the same Decode as a JSON POST over
// HTTP/1.1 keep-alive connections (the Connect protocol, as curl or a
// serverless function sends it), through vanguard into the grpc.Server.
func BenchmarkHTTPJSONDecodeText200(b *testing.B) {
	srv := New(Config{Auth: adminPolicy(b)}, zap.NewNop())
	h, err := srv.HTTPHandler(0)
	if err != nil {
		b.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	hs := &http.Server{Handler: h}
	go hs.Serve(lis)
	b.Cleanup(func() { hs.Close() })
	url := "http://" + lis.Addr().String() + "/contentbackup.v1.ContentService/Decode"
	body := []byte(`{"encodedContent":"` + base64.StdEncoding.EncodeToString(text200Envelope(b)) + `"}`)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
	b.SetParallelism(8)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Authorization", "Bearer "+testAdminToken)
			resp, err := client.Do(req)
			if err != nil {
				b.Error(err)
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				b.Errorf("status %d", resp.StatusCode)
				return
			}
		}
	})
}
