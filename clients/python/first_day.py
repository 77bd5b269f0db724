"""A Python caller's first day with the contentbackup API over gRPC.

Run by make test against a real server (test/clients) and walked through
in docs/clients.md: Encode and Decode, a group and its messages, a
StreamMessages stream, an Export stream written to a file that
`archivectl verify` accepts, StartExport then WaitOperation to the end,
and refused calls read as a status with its details. It prints one JSON
report for the test to check.

Stubs: clients/python/generate.sh OUT, with OUT on PYTHONPATH. Runtime:
Debian's python3-grpcio and python3-protobuf (no grpcio-status there, so
the details are read from the grpc-status-details-bin trailer by hand).

Environment: CONTENTBACKUP_GRPC (host:port of --listen), CONTENTBACKUP_TOKEN
(a bearer token with every scope), CONTENTBACKUP_OWNER (an owner name),
CONTENTBACKUP_OUT (a directory for the archive), CONTENTBACKUP_KEY_HEX (the
archive's 32-byte key, hex), CONTENTBACKUP_TLS_CA (optional: a PEM CA; without
it the server must be on loopback, plaintext).
"""

import json
import os
import pathlib
import sys
import time

import grpc
from google.protobuf import duration_pb2

from contentbackup.v1 import archive_service_pb2, archive_service_pb2_grpc
from contentbackup.v1 import backup_service_pb2, backup_service_pb2_grpc
from contentbackup.v1 import content_pb2, content_service_pb2, content_service_pb2_grpc
from contentbackup.v1 import conversation_service_pb2, conversation_service_pb2_grpc
from google.longrunning import operations_pb2, operations_pb2_grpc
from google.rpc import error_details_pb2, status_pb2
from xmtp.device_sync.group_backup import group_backup_pb2
from xmtp.device_sync.message_backup import message_backup_pb2

SERVICE_CONFIG = pathlib.Path(__file__).resolve().parents[2] / "api" / "service_config.json"


def env(name):
    value = os.environ.get(name)
    if not value:
        sys.exit(f"{name} is not set")
    return value


def channel(target, token):
    """A channel that sends the token on every call and retries as the
    service config says (UNAVAILABLE, on the methods safe to repeat)."""
    if token:
        call = grpc.access_token_call_credentials(token)
    ca = os.environ.get("CONTENTBACKUP_TLS_CA")
    if ca:
        transport = grpc.ssl_channel_credentials(root_certificates=pathlib.Path(ca).read_bytes())
    else:
        # Plaintext, which gRPC allows call credentials over only on loopback.
        transport = grpc.local_channel_credentials(grpc.LocalConnectionType.LOCAL_TCP)
    creds = grpc.composite_channel_credentials(transport, call) if token else transport
    options = [
        ("grpc.service_config", SERVICE_CONFIG.read_text()),
        ("grpc.enable_retries", 1),
        # The server's --max-recv-bytes is 32 MiB; the client's own default
        # send limit is none, and its receive limit 4 MiB.
        ("grpc.max_receive_message_length", 32 << 20),
    ]
    return grpc.secure_channel(target, creds, options=options)


def refusal(err, started):
    """A failed call as a status: its code and the details the server
    attaches (google.rpc.ErrorInfo, RequestInfo, BadRequest)."""
    out = {"code": err.code().name, "ms": int((time.monotonic() - started) * 1000)}
    for key, value in err.trailing_metadata() or ():
        if key != "grpc-status-details-bin":
            continue
        status = status_pb2.Status.FromString(value)
        for detail in status.details:
            if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
                info = error_details_pb2.ErrorInfo()
                detail.Unpack(info)
                out["reason"], out["domain"] = info.reason, info.domain
            elif detail.Is(error_details_pb2.RequestInfo.DESCRIPTOR):
                request = error_details_pb2.RequestInfo()
                detail.Unpack(request)
                out["requestId"] = request.request_id
            elif detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
                bad = error_details_pb2.BadRequest()
                detail.Unpack(bad)
                out["field"] = bad.field_violations[0].field
    return out


def refused(call):
    started = time.monotonic()
    try:
        call()
    except grpc.RpcError as err:
        return refusal(err, started)
    raise AssertionError("the call was expected to be refused and succeeded")


def first_day(target, token, owner, key, out_dir):
    ch = channel(target, token)
    content = content_service_pb2_grpc.ContentServiceStub(ch)
    conversations = conversation_service_pb2_grpc.ConversationServiceStub(ch)
    archives = archive_service_pb2_grpc.ArchiveServiceStub(ch)
    backups = backup_service_pb2_grpc.BackupServiceStub(ch)
    operations = operations_pb2_grpc.OperationsStub(ch)
    report = {"transport": "grpc-python", "owner": owner}

    # Encode a text and decode it back. A oneof is set by its field and
    # read with WhichOneof.
    encoded = content.Encode(content_service_pb2.EncodeRequest(content=content_pb2.Content(text="Hello from Python")), timeout=10)
    decoded = content.Decode(content_service_pb2.DecodeRequest(encoded_content=encoded.encoded_content), timeout=10)
    report["encodedType"] = encoded.content_type
    report["decodedText"] = decoded.content.text if decoded.WhichOneof("result") == "content" else None

    # A group and three messages. Enum values are module constants with
    # the proto's full names; 64-bit integers are int.
    group_id = b"py-first-day-000"
    conversations.PutGroup(
        conversation_service_pb2.PutGroupRequest(
            owner=owner,
            group=group_backup_pb2.GroupSave(
                id=group_id,
                created_at_ns=1_700_000_000_000_000_000,
                membership_state=group_backup_pb2.GROUP_MEMBERSHIP_STATE_SAVE_ALLOWED,
                conversation_type=group_backup_pb2.CONVERSATION_TYPE_SAVE_GROUP,
                mutable_metadata=group_backup_pb2.MutableMetadataSave(
                    attributes={"group_name": "First day in Python"}, super_admin_list=[owner]
                ),
            ),
        ),
        timeout=10,
    )
    appended = conversations.AppendMessages(
        conversation_service_pb2.AppendMessagesRequest(
            owner=owner,
            messages=[
                message_backup_pb2.GroupMessageSave(
                    id=f"msg-{i}".encode(),
                    group_id=group_id,
                    decrypted_message_bytes=encoded.encoded_content,
                    sent_at_ns=1_700_000_000_000_000_000 + i,
                    kind=message_backup_pb2.GROUP_MESSAGE_KIND_SAVE_APPLICATION,
                    sender_inbox_id="inbox-bob",
                    delivery_status=message_backup_pb2.DELIVERY_STATUS_SAVE_PUBLISHED,
                )
                for i in (1, 2, 3)
            ],
        ),
        timeout=10,
    )
    report["appended"] = appended.inserted

    # A server stream is an iterator of responses, a page of messages each.
    pages = conversations.StreamMessages(
        conversation_service_pb2.StreamMessagesRequest(owner=owner, group_id=group_id, page_size=2), timeout=30
    )
    report["streamed"] = sum(len(page.messages) for page in pages)

    # An Export stream: chunks to a file, then a summary.
    archive = pathlib.Path(out_dir) / "python.archive"
    summary = None
    with archive.open("wb") as f:
        for res in archives.Export(archive_service_pb2.ExportRequest(owner=owner, key=key), timeout=60):
            if res.WhichOneof("payload") == "chunk":
                f.write(res.chunk)
            else:
                summary = res.summary
    report["archive"] = str(archive)
    report["exportedMessages"] = str(summary.messages) if summary else None

    # A backup job: StartExport gives a google.longrunning.Operation;
    # WaitOperation returns it once done (or after its timeout, so loop);
    # its response is an Any holding an ExportJobResult.
    op = backups.StartExport(backup_service_pb2.StartExportRequest(owner=owner, label="first day in Python"), timeout=10)
    while not op.done:
        op = operations.WaitOperation(
            operations_pb2.WaitOperationRequest(name=op.name, timeout=duration_pb2.Duration(seconds=10)), timeout=15
        )
    if op.WhichOneof("result") == "error":
        raise RuntimeError(f"export job failed: {op.error.message}")
    result = backup_service_pb2.ExportJobResult()
    op.response.Unpack(result)
    report["job"] = {"operation": op.name, "backup": result.backup, "messages": str(result.summary.messages)}

    # Refusals read as a status with details.
    anonymous = conversation_service_pb2_grpc.ConversationServiceStub(channel(target, None))
    report["unauthenticated"] = refused(
        lambda: anonymous.ListGroups(conversation_service_pb2.ListGroupsRequest(owner=owner), timeout=10)
    )
    report["badPageSize"] = refused(
        lambda: conversations.ListGroups(conversation_service_pb2.ListGroupsRequest(owner=owner, page_size=5000), timeout=10)
    )
    oversized = content_service_pb2.DecodeRequest(encoded_content=bytes(40 << 20))
    report["oversized"] = refused(lambda: content.Decode(oversized, timeout=20))
    report["oversizedBytes"] = oversized.ByteSize()
    return report


def main():
    report = first_day(
        env("CONTENTBACKUP_GRPC"),
        env("CONTENTBACKUP_TOKEN"),
        env("CONTENTBACKUP_OWNER"),
        bytes.fromhex(env("CONTENTBACKUP_KEY_HEX")),
        env("CONTENTBACKUP_OUT"),
    )
    print(json.dumps(report))


if __name__ == "__main__":
    main()
