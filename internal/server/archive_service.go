package server

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	cb "github.com/contentbackup/contentbackup/api/contentbackup/v1"
	"github.com/contentbackup/contentbackup/internal/archive"
	"github.com/contentbackup/contentbackup/internal/backup"
	"github.com/contentbackup/contentbackup/internal/budget"
	"github.com/contentbackup/contentbackup/internal/codec"
	"github.com/contentbackup/contentbackup/internal/records"
	"github.com/contentbackup/contentbackup/internal/server/callbudget"
	"github.com/contentbackup/contentbackup/internal/server/streams"
	"github.com/contentbackup/contentbackup/internal/store"
	"github.com/contentbackup/contentbackup/internal/telemetry"
)

// exportChunkSize is the payload of one Export message: large enough that
// per-message overhead vanishes, small enough to stream.
const exportChunkSize = 256 << 10

// sendAhead is how many chunks may wait to be sent while export goes on.
const sendAhead = 4

// ArchiveService implements contentbackup.v1.ArchiveService: it moves bytes
// between gRPC streams and the backup package, and maps errors to codes.
type ArchiveService struct {
	cb.UnimplementedArchiveServiceServer
	store   store.Store
	now     func() time.Time
	limits  Limits
	pool    *budget.Pool
	streams *streams.Limiter
	metrics *telemetry.ServiceMetrics
}

// NewArchiveService returns the service over s, holding its streams to
// limits and charging what they read to pool.
func NewArchiveService(s store.Store, limits Limits, pool *budget.Pool) *ArchiveService {
	limits = limits.withDefaults()
	return &ArchiveService{store: s, now: time.Now, limits: limits, pool: pool,
		streams: streams.NewLimiter("archive", limits.MaxArchiveStreams, limits.MaxArchiveStreamsPerOwner)}
}

// readerOptions are the archive reader's limits on this server: records no
// larger than the largest record the limits let in, the zstd window the
// limits allow, every buffer charged to meter.
func (s *ArchiveService) readerOptions(meter *budget.Call) archive.ReaderOptions {
	opts := archive.ReaderOptions{
		MaxRecordSize: s.limits.maxArchiveRecord(),
		MaxWindow:     uint64(s.limits.ArchiveWindowBytes),
	}
	if meter != nil { // a nil *Call in the interface would not be nil
		opts.Meter = meter
	}
	return opts
}

// exportReservation is what one export is charged for its whole run.
func (s *ArchiveService) exportReservation() int64 {
	// The export's own, and the chunks waiting to be sent.
	return backup.ExportReservation(int64(s.limits.maxArchiveRecord())) + sendAhead*exportChunkSize
}

// readerCall is the budget of one stream's archive reader: its window and
// buffers, which grow with the largest record read.
func (s *ArchiveService) readerCall() *budget.Call {
	return s.pool.NewCall("archive reader", backup.ReaderReservation(s.readerOptions(nil)))
}

func checkKey(field string, key []byte) error {
	if len(key) != archive.KeySize {
		// Never the key itself: only its length.
		return status.Errorf(codes.InvalidArgument, "%s: %d bytes; an archive key is exactly %d bytes (ARCH-012)", field, len(key), archive.KeySize)
	}
	return nil
}

func (s *ArchiveService) Export(req *cb.ExportRequest, stream grpc.ServerStreamingServer[cb.ExportResponse]) error {
	if err := records.CheckOwner(req.GetOwner()); err != nil {
		return statusOf(err)
	}
	if err := checkKey("key", req.GetKey()); err != nil {
		return err
	}
	if err := checkNonconforming(req.GetNonconforming()); err != nil {
		return err
	}
	leave, err := s.streams.EnterFor("owner:"+req.GetOwner(), "owner")
	if err != nil {
		return err
	}
	defer leave()
	// What an export holds at once: the archive writer's window and
	// buffers, the chunks waiting to be sent, and a record or two of the
	// largest size being read and encoded. Reserved up front, so exports
	// past the server's budget are refused rather than let in.
	reserve, done := callbudget.Start(stream.Context(), s.pool, "export", s.exportReservation())
	defer done()
	if err := reserve.Charge(s.exportReservation()); err != nil {
		return statusOf(err)
	}
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	// The summary's SHA-256 is taken as each chunk goes out: on the
	// building goroutine it was an eighth of an export's CPU in line with
	// everything else.
	digest := sha256.New()
	// A client that stops reading holds the export's snapshot (a database
	// transaction) open; past the idle timeout the export ends instead.
	sender := streams.StartSender(ctx, cancel, sendAhead, s.limits.StreamIdleTimeout, func(c []byte) error {
		digest.Write(c)
		return stream.Send(&cb.ExportResponse{Payload: &cb.ExportResponse_Chunk{Chunk: c}})
	}, nil)
	out := &chunkWriter{send: func(b []byte) error {
		err := sender.Put(b)
		if errors.Is(err, streams.ErrStalled) {
			return errExportStalled
		}
		return err
	}}
	exportedAt := s.now().UnixNano()
	started := time.Now()
	counts, err := backup.Export(ctx, s.store, req.GetOwner(), req.GetKey(), req.GetOptions(), exportedAt, out,
		backup.ExportConfig{Nonconforming: nonconformingOf(req.GetNonconforming())})
	defer func() {
		s.metrics.Archive("export", out.n, counts.Groups, counts.Messages, counts.Consent, time.Since(started), err)
	}()
	if err == nil {
		err = out.Flush()
	}
	serr := sender.Finish()
	if sender.Stalled() {
		return status.Error(codes.DeadlineExceeded, status.Convert(serr).Message()+"; the partial output is not an archive")
	}
	if err == nil {
		err = serr
	}
	if err != nil {
		return exportFailure(stream.Context(), err, out.n)
	}
	return stream.Send(&cb.ExportResponse{Payload: &cb.ExportResponse_Summary{Summary: &cb.ExportSummary{
		Groups: counts.Groups, Messages: counts.Messages, ConsentRecords: counts.Consent,
		ArchiveBytes: out.n, Sha256: digest.Sum(nil), ExportedAtNs: exportedAt,
		ExcludedRecords: counts.Excluded, RepairedRecords: counts.Repaired,
	}}})
}

// EstimateExport runs Export's pipeline into a counter: the same
// selection, rules, limits and budget, nothing kept.
func (s *ArchiveService) EstimateExport(ctx context.Context, req *cb.EstimateExportRequest) (*cb.EstimateExportResponse, error) {
	if err := records.CheckOwner(req.GetOwner()); err != nil {
		return nil, statusOf(err)
	}
	if err := checkNonconforming(req.GetNonconforming()); err != nil {
		return nil, err
	}
	leave, err := s.streams.EnterFor("owner:"+req.GetOwner(), "owner")
	if err != nil {
		return nil, err
	}
	defer leave()
	reserve, done := callbudget.Start(ctx, s.pool, "estimate export", s.exportReservation())
	defer done()
	if err := reserve.Charge(s.exportReservation()); err != nil {
		return nil, statusOf(err)
	}
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	var out countingDiscard
	exportedAt := s.now().UnixNano()
	counts, err := backup.Export(ctx, s.store, req.GetOwner(), key, req.GetOptions(), exportedAt, &out,
		backup.ExportConfig{Nonconforming: nonconformingOf(req.GetNonconforming())})
	if err != nil {
		return nil, exportFailure(ctx, err, 0)
	}
	return &cb.EstimateExportResponse{Summary: &cb.ExportSummary{
		Groups: counts.Groups, Messages: counts.Messages, ConsentRecords: counts.Consent,
		ArchiveBytes: uint64(out), ExportedAtNs: exportedAt,
		ExcludedRecords: counts.Excluded, RepairedRecords: counts.Repaired,
	}}, nil
}

// countingDiscard counts what is written to it and keeps nothing.
type countingDiscard uint64

func (c *countingDiscard) Write(p []byte) (int, error) {
	*c += countingDiscard(len(p))
	return len(p), nil
}

// checkNonconforming refuses a value the enum does not define.
func checkNonconforming(n cb.NonconformingRecords) error {
	if _, ok := cb.NonconformingRecords_name[int32(n)]; !ok {
		return status.Errorf(codes.InvalidArgument, "nonconforming: %d is not a NonconformingRecords value", n)
	}
	return nil
}

// lintBatch is how many findings go in one Lint message.
const lintBatch = 100

// Lint streams the owner's nonconforming records in batches, then the
// summary.
func (s *ArchiveService) Lint(req *cb.LintRequest, stream grpc.ServerStreamingServer[cb.LintResponse]) error {
	if err := records.CheckOwner(req.GetOwner()); err != nil {
		return statusOf(err)
	}
	leave, err := s.streams.EnterFor("owner:"+req.GetOwner(), "owner")
	if err != nil {
		return err
	}
	defer leave()
	// Findings are found inside the owner's snapshot (a database
	// transaction): they go out from a goroutine of their own, and a
	// client that reads nothing for the idle timeout ends the call rather
	// than hold the snapshot open.
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	sender := streams.StartSender(ctx, cancel, 2, s.limits.StreamIdleTimeout, func(b []*cb.LintFinding) error {
		return stream.Send(&cb.LintResponse{Findings: b})
	}, nil)
	var batch []*cb.LintFinding
	send := func() error {
		if len(batch) == 0 {
			return nil
		}
		err := sender.Put(batch)
		batch = nil
		return err
	}
	counts, err := backup.Lint(ctx, s.store, req.GetOwner(), func(f backup.Finding) error {
		batch = append(batch, &cb.LintFinding{Kind: recordKinds[f.Kind], Id: f.ID, ConsentType: f.ConsentType,
			ConsentEntity: codec.Abbrev(f.Entity), Field: f.Field, Problem: f.Problem, Repair: f.Repair, Messages: f.Messages})
		if len(batch) == lintBatch {
			return send()
		}
		return nil
	})
	if err == nil {
		err = send()
	}
	serr := sender.Finish()
	if sender.Stalled() {
		return serr
	}
	if err == nil {
		err = serr
	}
	if err != nil {
		if ctxErr := stream.Context().Err(); ctxErr != nil {
			return status.FromContextError(ctxErr).Err()
		}
		return statusOf(err)
	}
	return stream.Send(&cb.LintResponse{Summary: &cb.LintSummary{Groups: counts.Groups, Messages: counts.Messages,
		ConsentRecords: counts.Consent, Findings: counts.Findings, Repairable: counts.Repairable}})
}

var recordKinds = map[string]cb.RecordKind{
	"group": cb.RecordKind_RECORD_KIND_GROUP, "message": cb.RecordKind_RECORD_KIND_MESSAGE, "consent": cb.RecordKind_RECORD_KIND_CONSENT,
}

// chunkWriter turns the archive's writes into stream messages of
// exportChunkSize bytes, counting what it sends.
type chunkWriter struct {
	send func([]byte) error
	buf  []byte
	n    uint64
}

func (w *chunkWriter) Write(p []byte) (int, error) {
	written := len(p)
	for len(p) > 0 {
		if w.buf == nil {
			w.buf = make([]byte, 0, exportChunkSize)
		}
		k := min(len(p), exportChunkSize-len(w.buf))
		w.buf = append(w.buf, p[:k]...)
		p = p[k:]
		if len(w.buf) == exportChunkSize {
			if err := w.Flush(); err != nil {
				return 0, err
			}
		}
	}
	return written, nil
}

// Flush sends what is buffered.
func (w *chunkWriter) Flush() error {
	if len(w.buf) == 0 {
		return nil
	}
	w.n += uint64(len(w.buf))
	// send keeps the buffer: the next chunk gets a new one.
	if err := w.send(w.buf); err != nil {
		return fmt.Errorf("send chunk: %w", err)
	}
	w.buf = nil
	return nil
}

// chunkReader reads the chunks of a client stream as one byte stream,
// counting the bytes received.
type chunkReader struct {
	recv func() ([]byte, error)
	buf  []byte
	n    uint64
}

func (r *chunkReader) Read(p []byte) (int, error) {
	for len(r.buf) == 0 {
		b, err := r.recv()
		if err != nil {
			return 0, err
		}
		r.buf = b
		r.n += uint64(len(b))
	}
	n := copy(p, r.buf)
	r.buf = r.buf[n:]
	return n, nil
}

// errExportStalled ends an export whose client stopped reading.
var errExportStalled = errors.New("the client stopped reading")

// errNotChunk is a client stream whose later message is not a chunk.
var errNotChunk = status.Error(codes.InvalidArgument, "payload: every message after the first must be a chunk")

func (s *ArchiveService) Import(stream grpc.ClientStreamingServer[cb.ImportRequest, cb.ImportResponse]) error {
	leave, err := s.streams.Enter()
	if err != nil {
		return err
	}
	defer leave()
	recv := streams.IdleRecv(stream.Context(), stream.Recv, s.limits.StreamIdleTimeout)
	first, err := recv()
	if err != nil {
		return recvStatus(err, "a first message naming owner and key")
	}
	start := first.GetStart()
	if start == nil {
		return status.Error(codes.InvalidArgument, "start: the first message must name the owner and key")
	}
	if err := records.CheckOwner(start.GetOwner()); err != nil {
		return statusOf(records.At("start", err))
	}
	if err := checkKey("start.key", start.GetKey()); err != nil {
		return err
	}
	leaveOwner, err := s.streams.EnterKey("owner:"+start.GetOwner(), "owner")
	if err != nil {
		return err
	}
	defer leaveOwner()
	in := &chunkReader{recv: func() ([]byte, error) {
		m, err := recv()
		if err != nil {
			return nil, err
		}
		if _, ok := m.GetPayload().(*cb.ImportRequest_Chunk); !ok {
			return nil, errNotChunk
		}
		return m.GetChunk(), nil
	}}
	readerBudget := s.readerCall()
	defer readerBudget.Close()
	ahead := s.pool.NewCall("import read-ahead", s.limits.ImportReadAheadBytes)
	defer ahead.Close()
	started := time.Now()
	res, err := backup.Import(stream.Context(), s.store, start.GetOwner(), start.GetKey(), in, backup.ImportOptions{
		Limits: s.limits.Records, Reader: s.readerOptions(readerBudget),
		ReadAhead: ahead, ReadAheadBytes: s.limits.ImportReadAheadBytes,
	})

	applied := func(c backup.ElementCounts) uint64 { return c.Inserted + c.Updated + c.Unchanged }
	s.metrics.Archive("import", in.n, applied(res.Groups), applied(res.Messages), applied(res.Consent), time.Since(started), err)
	if err != nil {
		return archiveStatus(stream.Context(), err, "import")
	}
	return stream.SendAndClose(importResponse(res))
}

// keyedStream is the shape ReadMetadata and Verify share: a key, then
// chunks.
type keyedStream[T interface {
	GetKey() []byte
	GetChunk() []byte
}] struct {
	recv func() (T, error)
}

// open receives the key and returns a reader over the chunks after it.
func (k keyedStream[T]) open() ([]byte, io.Reader, error) {
	first, err := k.recv()
	if err != nil {
		return nil, nil, recvStatus(err, "a first message holding the key")
	}
	if len(first.GetChunk()) > 0 {
		return nil, nil, status.Error(codes.InvalidArgument, "key: the first message must hold the key")
	}
	if err := checkKey("key", first.GetKey()); err != nil {
		return nil, nil, err
	}
	return first.GetKey(), &chunkReader{recv: func() ([]byte, error) {
		m, err := k.recv()
		if err != nil {
			return nil, err
		}
		if len(m.GetKey()) > 0 {
			return nil, errNotChunk
		}
		return m.GetChunk(), nil
	}}, nil
}

// enterKeyed takes the slots of a stream that names no owner: one of the
// server's and one of its principal's.
func (s *ArchiveService) enterKeyed(ctx context.Context) (leave func(), err error) {
	return s.streams.EnterFor("principal:"+principalName(ctx), "principal")
}

func (s *ArchiveService) ReadMetadata(stream grpc.ClientStreamingServer[cb.ReadMetadataRequest, cb.ReadMetadataResponse]) error {
	leave, err := s.enterKeyed(stream.Context())
	if err != nil {
		return err
	}
	defer leave()
	key, in, err := keyedStream[*cb.ReadMetadataRequest]{recv: streams.IdleRecv(stream.Context(), stream.Recv, s.limits.StreamIdleTimeout)}.open()
	if err != nil {
		return err
	}
	readerBudget := s.readerCall()
	defer readerBudget.Close()
	r, err := archive.NewReader(in, key, s.readerOptions(readerBudget))
	if err != nil {
		return archiveStatus(stream.Context(), err, "read metadata")
	}
	defer r.Close()
	meta, err := r.Metadata()
	if err != nil {
		return archiveStatus(stream.Context(), err, "read metadata")
	}
	form := cb.NonceForm_NONCE_FORM_COUNTER
	if r.Stats().Record0Legacy {
		form = cb.NonceForm_NONCE_FORM_LEGACY
	}
	// Record 0 is all it needs: it answers without reading the rest.
	return stream.SendAndClose(&cb.ReadMetadataResponse{Version: uint32(r.Version()), Metadata: meta, Record0Nonce: form})
}

func (s *ArchiveService) Verify(stream grpc.ClientStreamingServer[cb.VerifyRequest, cb.VerifyResponse]) error {
	leave, err := s.enterKeyed(stream.Context())
	if err != nil {
		return err
	}
	defer leave()
	key, in, err := keyedStream[*cb.VerifyRequest]{recv: streams.IdleRecv(stream.Context(), stream.Recv, s.limits.StreamIdleTimeout)}.open()
	if err != nil {
		return err
	}
	readerBudget := s.readerCall()
	defer readerBudget.Close()
	rep, err := backup.Verify(in, key, s.readerOptions(readerBudget))
	if err != nil {
		return status.Error(codes.InvalidArgument, clip(err.Error()))
	}
	var be *budget.ExceededError
	if errors.As(rep.Err, &be) {
		return budgetStatus(be, "verify")
	}
	if ctxErr := stream.Context().Err(); ctxErr != nil {
		return status.FromContextError(ctxErr).Err()
	}
	resp := &cb.VerifyResponse{
		Version: uint32(rep.Version), Metadata: rep.Metadata, Records: rep.Records, Groups: rep.Groups,
		Messages: rep.Messages, ConsentRecords: rep.Consent, Skipped: rep.Skipped, LegacyRecords: rep.Legacy,
	}
	if rep.Err != nil {
		if st, ok := status.FromError(rep.Err); ok && st.Code() != codes.Unknown {
			return st.Err() // the client's stream broke: not the archive's fault
		}
		resp.Problem = &cb.VerifyProblem{Reason: rep.Err.Error()}
		var re *archive.RecordError
		if errors.As(rep.Err, &re) {
			resp.Problem.Record = &re.Record
		}
	}
	return stream.SendAndClose(resp)
}
