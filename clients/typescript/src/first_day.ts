// A TypeScript caller's first day with the contentbackup API, run by
// make test against a real server (test/clients) and walked through in
// docs/clients.md: Encode and Decode, a group and its messages, a
// StreamMessages stream, an Export stream written to a file that
// `archivectl verify` accepts, StartExport then WaitOperation to the
// end, and refused calls read as a status with its details. It does all
// of it twice, over Connect (the HTTP listener) and over gRPC (the gRPC
// listener), and prints one JSON report per line for the test to check.
//
// Environment: CONTENTBACKUP_GRPC (http://host:port of --listen),
// CONTENTBACKUP_HTTP (of --http-listen), CONTENTBACKUP_TOKEN (a bearer
// token with every scope), CONTENTBACKUP_OWNER (an owner name prefix),
// CONTENTBACKUP_OUT (a directory for the archives) and
// CONTENTBACKUP_KEY_HEX (the archives' 32-byte key, hex).
import { writeFile } from "node:fs/promises";
import { join } from "node:path";

import { create, toBinary } from "@bufbuild/protobuf";
import { anyUnpack, durationFromMs } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError, createClient, type Interceptor, type Transport } from "@connectrpc/connect";
import { createConnectTransport, createGrpcTransport } from "@connectrpc/connect-node";

import { ArchiveService } from "./gen/contentbackup/v1/archive_service_pb.ts";
import { BackupService, ExportJobResultSchema } from "./gen/contentbackup/v1/backup_service_pb.ts";
import { ContentService, DecodeRequestSchema } from "./gen/contentbackup/v1/content_service_pb.ts";
import { ConversationService } from "./gen/contentbackup/v1/conversation_service_pb.ts";
import { ConversationTypeSave, GroupMembershipStateSave } from "./gen/xmtp/device_sync/group_backup/group_backup_pb.ts";
import { DeliveryStatusSave, GroupMessageKindSave } from "./gen/xmtp/device_sync/message_backup/message_backup_pb.ts";
import { Operations } from "./gen/google/longrunning/operations_pb.ts";
import { BadRequestSchema, ErrorInfoSchema, RequestInfoSchema } from "./gen/google/rpc/error_details_pb.ts";

function env(name: string): string {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set`);
  return value;
}

// bearer adds the token to every call: one interceptor instead of a
// header on each call.
function bearer(token: string): Interceptor {
  return (next) => async (req) => {
    req.header.set("authorization", `Bearer ${token}`);
    return next(req);
  };
}

type Refusal = { code: string; reason?: string; domain?: string; requestId?: string; field?: string; ms?: number };

// refusal reads a failed call as a status: its code and the details the
// server attaches (google.rpc.ErrorInfo, RequestInfo, BadRequest).
function refusal(err: unknown, started?: number): Refusal {
  const e = ConnectError.from(err);
  const out: Refusal = { code: Code[e.code] };
  const info = e.findDetails(ErrorInfoSchema)[0];
  if (info) {
    out.reason = info.reason;
    out.domain = info.domain;
  }
  const request = e.findDetails(RequestInfoSchema)[0];
  if (request) out.requestId = request.requestId;
  const bad = e.findDetails(BadRequestSchema)[0];
  if (bad && bad.fieldViolations.length > 0) out.field = bad.fieldViolations[0].field;
  if (started !== undefined) out.ms = Date.now() - started;
  return out;
}

async function refused<T>(call: () => Promise<T>): Promise<Refusal> {
  const started = Date.now();
  try {
    await call();
  } catch (err) {
    return refusal(err, started);
  }
  throw new Error("the call was expected to be refused and succeeded");
}

function bytes(text: string): Uint8Array {
  return new TextEncoder().encode(text);
}

async function firstDay(name: string, transport: Transport, anonymous: Transport, owner: string, key: Uint8Array, outDir: string) {
  const content = createClient(ContentService, transport);
  const conversations = createClient(ConversationService, transport);
  const archives = createClient(ArchiveService, transport);
  const backups = createClient(BackupService, transport);
  const operations = createClient(Operations, transport);
  const report: Record<string, unknown> = { transport: name, owner };

  // Encode a text and decode it back. A oneof is { case, value }.
  const encoded = await content.encode({ input: { case: "content", value: { value: { case: "text", value: `Hello from ${name}` } } } });
  const decoded = await content.decode({ encodedContent: encoded.encodedContent });
  report.encodedType = encoded.contentType;
  report.decodedText = decoded.result.case === "content" && decoded.result.value.value.case === "text" ? decoded.result.value.value.value : null;

  // A group and three messages. Enums are TypeScript enums named by the
  // proto enum without its prefix (ConversationTypeSave.GROUP); 64-bit
  // integers are bigint.
  const groupId = bytes("ts-first-day-000").slice(0, 16);
  await conversations.putGroup({
    owner,
    group: {
      id: groupId,
      createdAtNs: 1_700_000_000_000_000_000n,
      membershipState: GroupMembershipStateSave.ALLOWED,
      conversationType: ConversationTypeSave.GROUP,
      mutableMetadata: { attributes: { group_name: `First day over ${name}` }, superAdminList: [owner] },
    },
  });
  const appended = await conversations.appendMessages({
    owner,
    messages: [1, 2, 3].map((i) => ({
      id: bytes(`msg-${i}`),
      groupId,
      decryptedMessageBytes: encoded.encodedContent,
      sentAtNs: 1_700_000_000_000_000_000n + BigInt(i),
      kind: GroupMessageKindSave.APPLICATION,
      senderInboxId: "inbox-bob",
      deliveryStatus: DeliveryStatusSave.PUBLISHED,
    })),
  });
  report.appended = appended.inserted;

  // A server stream: for await over the responses, a page of messages each.
  let streamed = 0;
  for await (const page of conversations.streamMessages({ owner, groupId, pageSize: 2 })) {
    streamed += page.messages.length;
  }
  report.streamed = streamed;

  // An Export stream: chunks to a file, then a summary.
  const chunks: Uint8Array[] = [];
  let summary;
  for await (const res of archives.export({ owner, key })) {
    if (res.payload.case === "chunk") chunks.push(res.payload.value);
    else if (res.payload.case === "summary") summary = res.payload.value;
  }
  const archive = join(outDir, `${name}.archive`);
  await writeFile(archive, Buffer.concat(chunks));
  report.archive = archive;
  report.exportedMessages = summary ? summary.messages.toString() : null;

  // A backup job: StartExport gives a google.longrunning.Operation;
  // WaitOperation returns it once done (or after its timeout, so loop),
  // and its response is an Any holding an ExportJobResult.
  let op = await backups.startExport({ owner, label: `first day over ${name}` });
  while (!op.done) {
    op = await operations.waitOperation({ name: op.name, timeout: durationFromMs(10_000) });
  }
  if (op.result.case === "error") throw new Error(`export job failed: ${op.result.value.message}`);
  const result = op.result.case === "response" ? anyUnpack(op.result.value, ExportJobResultSchema) : undefined;
  report.job = { operation: op.name, backup: result?.backup ?? null, messages: result?.summary?.messages.toString() ?? null };

  // Refusals read as a status with details.
  report.unauthenticated = await refused(() => createClient(ConversationService, anonymous).listGroups({ owner }));
  report.badPageSize = await refused(() => conversations.listGroups({ owner, pageSize: 5000 }));
  // A request over the server's --max-recv-bytes, with a deadline: the
  // code the caller sees and how long it took.
  const oversized = create(DecodeRequestSchema, { encodedContent: new Uint8Array(40 << 20) });
  report.oversized = await refused(() => content.decode(oversized, { timeoutMs: 20_000 }));
  report.oversizedBytes = toBinary(DecodeRequestSchema, oversized).length;
  return report;
}

async function main() {
  const token = env("CONTENTBACKUP_TOKEN");
  const owner = env("CONTENTBACKUP_OWNER");
  const outDir = env("CONTENTBACKUP_OUT");
  const key = Uint8Array.from(Buffer.from(env("CONTENTBACKUP_KEY_HEX"), "hex"));
  const interceptors = [bearer(token)];
  // writeMaxBytes: the server's --max-recv-bytes (32 MiB by default).
  // Over gRPC, Node's HTTP/2 client keeps writing a request the server has
  // already refused, so without it an oversized call waits for its
  // deadline; with it, the call is refused here, at once, with the same
  // RESOURCE_EXHAUSTED (docs/clients.md).
  const writeMaxBytes = Number(process.env.CONTENTBACKUP_MAX_RECV_BYTES ?? 32 << 20);
  const connect = (auth: Interceptor[]) =>
    createConnectTransport({ baseUrl: env("CONTENTBACKUP_HTTP"), httpVersion: "1.1", interceptors: auth, writeMaxBytes });
  const grpc = (auth: Interceptor[]) =>
    createGrpcTransport({ baseUrl: env("CONTENTBACKUP_GRPC"), interceptors: auth, writeMaxBytes });
  for (const [name, make] of [["connect", connect], ["grpc", grpc]] as const) {
    const report = await firstDay(name, make(interceptors), make([]), `${owner}-${name}`, key, outDir);
    process.stdout.write(JSON.stringify(report) + "\n");
  }
}

await main();
