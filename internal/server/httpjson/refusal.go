package httpjson

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	"github.com/contentbackup/contentbackup/internal/server/authz"
	"github.com/contentbackup/contentbackup/internal/server/requestid"
)

// The door's own answers: the requests it turns away before their body is
// read, answered at once and in the Connect error shape every answer of
// the listener has.

// refuse answers a request the door turns away before reading its body,
// at once, and closes its connection soon after (lastAnswer).
func refuse(w http.ResponseWriter, status int, code, msg string) {
	lastAnswer(w)
	httpError(w, status, code, msg)
}

// refuseUnauthenticated is the door's 401, with what the gRPC listener's
// refusal carries: the reason as google.rpc.ErrorInfo and the request id
// as google.rpc.RequestInfo (in Connect's error details) and in the
// response's x-request-id header (issue 51: a Connect caller got
// neither).
func refuseUnauthenticated(w http.ResponseWriter, r *http.Request, msg string) {
	lastAnswer(w)
	ctx := metadata.NewIncomingContext(r.Context(), metadata.Pairs(requestid.Header, r.Header.Get(requestid.Header)))
	_, id := requestid.With(ctx)
	w.Header().Set(requestid.Header, id)
	details := make([]connectDetail, 0, 2)
	for _, m := range []proto.Message{
		&errdetails.ErrorInfo{Reason: authz.ReasonUnauthenticated, Domain: authz.ErrorDomain},
		&errdetails.RequestInfo{RequestId: id},
	} {
		b, err := proto.Marshal(m)
		if err != nil {
			continue
		}
		details = append(details, connectDetail{Type: string(m.ProtoReflect().Descriptor().FullName()), Value: base64.RawStdEncoding.EncodeToString(b)})
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusUnauthorized)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false) // "<token>" as it reads, as every other answer
	_ = enc.Encode(struct {
		Code    string          `json:"code"`
		Message string          `json:"message"`
		Details []connectDetail `json:"details"`
	}{"unauthenticated", msg, details})
}

// connectDetail is one error detail as the Connect protocol writes it in
// JSON: the message's full name and its binary form in base64.
type connectDetail struct {
	Type  string `json:"type"`
	Value string `json:"value"`
}

// refuse413 is tooLarge, answered as refuse answers.
func refuse413(w http.ResponseWriter, got, limit int64) {
	lastAnswer(w)
	tooLarge(w, got, limit)
}

// DrainGrace is how long a refused request's connection waits for the
// rest of a small body before it closes: enough for a client that sent
// it to have it read (so it gets the answer, not a reset), too little
// for one that trickles it to hold the connection.
const DrainGrace = time.Second

// lastAnswer makes the answer the connection's last, sent before any of
// the body is read, with the rest of the body read only until DrainGrace.
// Go's server otherwise reads what is left of a small body (under 256
// KiB) before it writes the answer, and again when it closes the body,
// with no deadline: an anonymous request that declared 100 bytes and
// sent none was never answered, and held its descriptor as long as its
// sender liked (issue 47, finding 5: 300 of them, 300 descriptors).
func lastAnswer(w http.ResponseWriter) {
	w.Header().Set("Connection", "close")
	_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(DrainGrace))
}

func httpError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	fmt.Fprintf(w, `{"code":%q,"message":%q}`+"\n", code, msg)
}
