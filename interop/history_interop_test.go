package interop

import (
	"encoding/hex"
	"net/http/httptest"
	"testing"

	"gocloud.dev/blob"
	_ "gocloud.dev/blob/fileblob"

	"github.com/contentbackup/contentbackup/internal/history"
	"github.com/contentbackup/contentbackup/internal/store/enginetest"
)

// TestReferenceThroughTheHistoryServer (issue 38): the reference's
// archive travels through this history server over HTTP as device sync
// carries it: POSTed to /upload as libxmtp's post_to_url sends it (the
// raw archive, no other header), the id read from the answer, the bytes
// fetched back from /files/{id}, and imported by a fresh reference client
// with the archive's key: the bytes come back unchanged and the reference
// reads its messages. The reference's own sendSyncArchive is tried too:
// offline it stops before its upload (its sync group's commit is never
// echoed by a network), which the test logs; docs/history-server.md says
// what that leaves unproven.
func TestReferenceThroughTheHistoryServer(t *testing.T) {
	st := enginetest.SQLite(t)
	bucket, err := blob.OpenBucket(t.Context(), "file://"+t.TempDir()+"?no_tmp_dir=1&metadata=skip")
	if err != nil {
		t.Fatal(err)
	}
	defer bucket.Close()
	srv := httptest.NewServer(history.New(history.Config{Store: st, Bucket: bucket}))
	defer srv.Close()
	var out struct {
		ID         string `json:"id"`
		Status     int    `json:"status"`
		DownStatus int    `json:"downloadStatus"`
		Uploaded   int    `json:"uploaded"`
		Downloaded int    `json:"downloaded"`
		Same       bool   `json:"same"`
		View       struct {
			Messages []struct {
				DecodedType string `json:"decodedType"`
			} `json:"messages"`
		} `json:"view"`
		DeviceSync map[string]any `json:"deviceSync"`
	}
	runScript(t, "archive.mjs", "history", map[string]any{"key": hex.EncodeToString(interopKey), "url": srv.URL}, &out)
	t.Logf("the reference's own sendSyncArchive offline: %v", out.DeviceSync)
	if out.Status != 0 || out.DownStatus != 0 || len(out.ID) != 40 {
		t.Fatalf("the history server answered the reference's upload %d, its download %d, id %q", out.Status, out.DownStatus, out.ID)
	}
	if !out.Same || out.Uploaded == 0 || out.Downloaded != out.Uploaded {
		t.Fatalf("uploaded %d bytes, downloaded %d, the same: %v", out.Uploaded, out.Downloaded, out.Same)
	}
	if len(out.View.Messages) < 2 {
		t.Fatalf("the reference imported %d messages from the downloaded archive", len(out.View.Messages))
	}
	f, err := st.GetHistoryFile(t.Context(), out.ID)
	if err != nil || f.Size != int64(out.Uploaded) || f.Downloads != 1 {
		t.Fatalf("the catalog row: %+v, %v", f, err)
	}
}
