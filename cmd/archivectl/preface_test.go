package main

import (
	"net"
	"strings"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	cb "github.com/contentbackup/contentbackup/api/contentbackup/v1"
	"github.com/contentbackup/contentbackup/internal/transport"
)

// TestPrefaceWatchFailsAtTheFirstSilentClose (issue 36): a server that
// closes a plaintext connection without a byte (as a TLS server does) ends
// the call at its first connection, UNAVAILABLE naming why, instead of the
// retry policy's five attempts.
func TestPrefaceWatchFailsAtTheFirstSilentClose(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	var accepted atomic.Int32
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			c.Close()
		}
	}()
	opts := append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials()), transport.WithRetries()}, (&prefaceWatch{}).options()...)
	conn, err := grpc.NewClient(lis.Addr().String(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_, err = cb.NewArchiveServiceClient(conn).EstimateExport(t.Context(), &cb.EstimateExportRequest{Owner: "alice"})
	if st := status.Convert(err); st.Code() != codes.Unavailable || !strings.Contains(st.Message(), errNoPreface.Error()) {
		t.Fatalf("got %v; want UNAVAILABLE saying %q", err, errNoPreface)
	}
	if n := accepted.Load(); n != 1 {
		t.Errorf("%d connections; want the first one to end the call", n)
	}
}
