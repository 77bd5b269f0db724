package main

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/contentbackup/contentbackup/api/openapi"
	"github.com/contentbackup/contentbackup/internal/server/httpjson"
)

// swagger is what this test reads of the OpenAPI document.
type swagger struct {
	Paths map[string]map[string]struct {
		OperationID string `json:"operationId"`
		Parameters  []struct {
			Name    string `json:"name"`
			In      string `json:"in"`
			Pattern string `json:"pattern"`
		} `json:"parameters"`
	} `json:"paths"`
}

var pathParam = regexp.MustCompile(`\{([^}]+)\}`)

// TestOpenAPIOperationsAreServed (issue 51): every operation the
// committed OpenAPI document lists is a route of the assembled server's
// HTTP/JSON listener. Each is called by the development operator with an
// empty message; whatever the API answers (a result, INVALID_ARGUMENT,
// NOT_FOUND), it answers as the API, in its JSON error shape, never as a
// route the listener lacks (404 without the API's not_found, 405, 415).
// The document itself is served there, to proven callers only.
func TestOpenAPIOperationsAreServed(t *testing.T) {
	dataDir := t.TempDir()
	srv := serveIn(t, "LISTEN_ADDR=127.0.0.1:0", "HTTP_LISTEN_ADDR=127.0.0.1:0", "METRICS_ADDR=", "LOG_FORMAT=json", "DATA_DIR="+dataDir)
	base := "http://" + loggedHTTPAddr(t, srv.logs)
	tokenFile, err := os.ReadFile(filepath.Join(dataDir, "dev-token"))
	if err != nil {
		t.Fatal(err)
	}
	token := strings.TrimSpace(string(tokenFile))
	do := func(method, url, token, body string) (int, string) {
		req, _ := http.NewRequest(method, url, strings.NewReader(body))
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}

	var doc swagger
	if err := json.Unmarshal(openapi.Document(), &doc); err != nil {
		t.Fatalf("api/openapi: %v", err)
	}
	if len(doc.Paths) < 40 {
		t.Fatalf("the document lists %d paths; it should list every REST rule and unary RPC", len(doc.Paths))
	}
	called := 0
	for path, ops := range doc.Paths {
		for method, op := range ops {
			values := map[string]string{}
			for _, p := range op.Parameters {
				if p.In == "path" {
					values[p.Name] = "alice"
					if p.Pattern != "" {
						values[p.Name] = strings.ReplaceAll(p.Pattern, ".+", "0123456789abcdef")
					}
				}
			}
			target := pathParam.ReplaceAllStringFunc(path, func(m string) string { return values[m[1:len(m)-1]] })
			method = strings.ToUpper(method)
			body := ""
			if method == http.MethodPost {
				body = "{}"
			}
			code, answer := do(method, base+target, token, body)
			called++
			var apiError struct{ Code string }
			isAPIError := json.Unmarshal([]byte(answer), &apiError) == nil && apiError.Code != ""
			switch {
			case code == http.StatusMethodNotAllowed || code == http.StatusUnsupportedMediaType:
				t.Errorf("%s %s (%s): %d %s", method, target, op.OperationID, code, answer)
			case code == http.StatusNotFound && (!isAPIError || apiError.Code != "not_found"):
				t.Errorf("%s %s (%s): 404 without the API's not_found: %s", method, target, op.OperationID, answer)
			case code >= 400 && !isAPIError:
				t.Errorf("%s %s (%s): %d not in the API's error shape: %s", method, target, op.OperationID, code, answer)
			}
		}
	}
	t.Logf("%d operations called", called)

	if code, body := do(http.MethodGet, base+httpjson.OpenAPIPath, token, ""); code != http.StatusOK || body != string(openapi.Document()) {
		t.Errorf("GET %s: %d, %d bytes; want the document", httpjson.OpenAPIPath, code, len(body))
	}
	if code, _ := do(http.MethodGet, base+httpjson.OpenAPIPath, "", ""); code != http.StatusUnauthorized {
		t.Errorf("GET %s without a token: %d, want 401", httpjson.OpenAPIPath, code)
	}
}

// loggedHTTPAddr is the address the server logged its HTTP/JSON listener on.
func loggedHTTPAddr(t *testing.T, logs func() string) string {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		sc := bufio.NewScanner(strings.NewReader(logs()))
		for sc.Scan() {
			var e struct{ Msg, Addr string }
			if json.Unmarshal(sc.Bytes(), &e) == nil && strings.HasPrefix(e.Msg, "serving HTTP/JSON") {
				return e.Addr
			}
		}
	}
	t.Fatalf("no HTTP/JSON listener logged:\n%s", logs())
	return ""
}
