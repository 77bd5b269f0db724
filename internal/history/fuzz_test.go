package history

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"testing"

	"gocloud.dev/blob"

	"github.com/contentbackup/contentbackup/internal/store/enginetest"
)

// FuzzHistoryRequest: whatever method, path and body an anonymous client
// sends, the history server answers one of its statuses, never a 5xx
// and never a panic, and what it stores stays within its limit.
func FuzzHistoryRequest(f *testing.F) {
	f.Add("POST", "/upload", []byte("archive"))
	f.Add("GET", "/files/"+"ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12", []byte{})
	f.Add("GET", "/files/../../etc/passwd", []byte{})
	f.Add("HEAD", "/", []byte{})
	f.Add("OPTIONS", "/upload", []byte{})
	f.Add("DELETE", "/files/x", []byte("x"))
	f.Add("POST", "/upload", bytes.Repeat([]byte{0xff}, 5000))
	st := enginetest.SQLite(f)
	bucket, err := blob.OpenBucket(f.Context(), "file://"+f.TempDir()+"?no_tmp_dir=1&metadata=skip")
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { bucket.Close() })
	svc := New(Config{Store: st, Bucket: bucket, MaxUpload: 4096, UploadBurst: 1 << 30, UploadsPerMinute: 1 << 30, UploadsPerClient: 1 << 10})
	allowed := map[int]bool{200: true, 204: true, 400: true, 404: true, 405: true, 413: true, 429: true}
	f.Fuzz(func(t *testing.T, method, path string, body []byte) {
		req, err := http.NewRequest(method, "http://history.test/", bytes.NewReader(body))
		if err != nil {
			return // not a request net/http would hand a handler
		}
		req.URL.Path = path
		w := httptest.NewRecorder()
		svc.ServeHTTP(w, req)
		if !allowed[w.Code] {
			t.Fatalf("%s %q with %d bytes: %d %s", method, path, len(body), w.Code, w.Body.String())
		}
		if used, _, err := st.HistoryBytes(t.Context()); err != nil || used > 1<<30 {
			t.Fatalf("stored %d bytes, %v", used, err)
		}
	})
}
