// Runs the reference client's archive code (libxmtp through
// @xmtp/wasm-bindings) for the Go interoperability tests, with a client
// made offline as REFERENCE.md describes: every network call is answered
// with an empty success, and the identity is signed with a fixed key.
//
//   node archive.mjs create   stdin {key, custom: [envelope]}; writes messages
//                             of every catalogue type the reference encodes,
//                             plus the given envelopes, and consent, then
//                             prints {archive, groups, messages, consent}
//   node archive.mjs import   stdin {key, archive, consent: [{entityType, entity}]};
//                             prints the reference's reading of the archive:
//                             {metadata, conversations, messages, consent}
//   node archive.mjs history  stdin {key, url}; the history server's protocol
//                             as the reference's device sync speaks it: the
//                             reference's archive POSTed to {url}/upload as
//                             libxmtp's post_to_url sends it, the id read
//                             from the answer, the bytes fetched back from
//                             {url}/files/{id} and imported into a fresh
//                             client; prints {id, uploaded, downloaded,
//                             view, deviceSync} (deviceSync: what the
//                             reference's own sendSyncArchive did offline)
//   node archive.mjs import-chain stdin {archives: [{key, archive}]}; imports
//                             each into one fresh client, oldest first, and
//                             prints the view after the last;
//   node archive.mjs import-each  stdin {key, archives: [{archive, consent}]};
//                             imports each into a fresh client, one line each:
//                             the view as above, or {error}
//
// Bytes travel as lowercase hex; envelopes as {type, parameters, fallback,
// compression, content (hex)}.
import fs from 'node:fs';
import * as b from '@xmtp/wasm-bindings';
import { secp256k1 } from '@noble/curves/secp256k1.js';
import { keccak_256 } from '@noble/hashes/sha3.js';

const wasm = new URL('./node_modules/@xmtp/wasm-bindings/dist/bindings_wasm_bg.wasm', import.meta.url);
b.initSync({ module: fs.readFileSync(wasm) });

const hex = (u8) => Buffer.from(u8).toString('hex');
const unhex = (s) => new Uint8Array(Buffer.from(s, 'hex'));
const json = (v) => JSON.stringify(v, (_, x) => (typeof x === 'bigint' ? x.toString() : x instanceof Map ? Object.fromEntries(x) : x));

// Every gRPC-web call succeeds with an empty message: one data frame of
// length 0, then a trailer frame with grpc-status 0. Calls to the history
// server under test (historyURL) go to the network.
const realFetch = globalThis.fetch;
let historyURL = null;
globalThis.fetch = async (resource, init) => {
  const url = typeof resource === 'string' ? resource : resource?.url ?? String(resource);
  if (historyURL && url.startsWith(historyURL)) return realFetch(resource, init);
  const trailer = new TextEncoder().encode('grpc-status:0\r\n');
  const body = new Uint8Array(10 + trailer.length);
  body[5] = 0x80;
  new DataView(body.buffer).setUint32(6, trailer.length);
  body.set(trailer, 10);
  return new Response(body, { status: 200, headers: { 'content-type': 'application/grpc-web+proto' } });
};

// offlineClient registers a fresh in-memory client whose wallet is the
// secp256k1 key seed × 32, signing its identity with EIP-191.
async function offlineClient(seed) {
  const priv = new Uint8Array(32).fill(seed);
  const pub = secp256k1.getPublicKey(priv, false);
  const address = '0x' + hex(keccak_256(pub.slice(1)).slice(-20));
  const ident = { identifier: address, identifierKind: b.IdentifierKind.Ethereum };
  const inboxId = b.generateInboxId(ident, 0n);
  const client = await b.createClient('http://localhost:5556', inboxId, ident, null, null,
    b.DeviceSyncMode.Disabled, null, { structured: false, level: b.LogLevel.Error }, true, null, null, 0n);
  const req = client.createInboxSignatureRequest();
  const text = new TextEncoder().encode(await req.signatureText());
  const prefix = new TextEncoder().encode(`\x19Ethereum Signed Message:\n${text.length}`);
  const digest = keccak_256(new Uint8Array([...prefix, ...text]));
  const sig = secp256k1.sign(digest, priv, { prehash: false, format: 'recovered' });
  const rsv = new Uint8Array(65); // noble puts the recovery byte first; Ethereum last
  rsv.set(sig.slice(1), 0);
  rsv[64] = sig[0] + 27;
  await req.addEcdsaSignature(rsv);
  await client.registerIdentity(req);
  return client;
}

const envelopeOut = (ec) => ({
  type: ec.type, parameters: ec.parameters instanceof Map ? Object.fromEntries(ec.parameters) : ec.parameters,
  fallback: ec.fallback, compression: ec.compression, content: hex(ec.content),
});
const envelopeIn = (e) => ({ type: e.type, parameters: e.parameters || {}, fallback: e.fallback, compression: e.compression, content: unhex(e.content) });

const fill = (n, v) => new Uint8Array(n).fill(v);
const remote = {
  url: 'https://files.example.com/object/1', contentDigest: 'ab'.repeat(32),
  secret: fill(32, 1), salt: fill(32, 2), nonce: fill(12, 3), scheme: 'https://', contentLength: 1234, filename: 'photo.jpg',
};
const referenceContent = {
  text: () => b.encodeText('Hello from the reference ✓'),
  markdown: () => b.encodeMarkdown('# Title\n\n*body*'),
  reaction: () => b.encodeReaction({ reference: 'ab'.repeat(32), referenceInboxId: '', action: b.ReactionAction.Added, content: '👍', schema: b.ReactionSchema.Unicode }),
  readReceipt: () => b.encodeReadReceipt({}),
  attachment: () => b.encodeAttachment({ filename: 'notes.txt', mimeType: 'text/plain', content: new TextEncoder().encode('attached bytes') }),
  remoteAttachment: () => b.encodeRemoteAttachment(remote),
  multiRemoteAttachment: () => b.encodeMultiRemoteAttachment({ attachments: [remote] }),
  transactionReference: () => b.encodeTransactionReference({ networkId: '8453', reference: '0xfeedbeef' }),
  intent: () => b.encodeIntent({ id: 'i1', actionId: 'yes' }),
};

async function create(input) {
  const client = await offlineClient(7);
  const convs = client.conversations();
  const groups = [convs.createGroupOptimistic({ groupName: 'Reference group' }), convs.createGroupOptimistic()];
  const messages = [];
  const push = (group, ec, name) => {
    const id = group.prepareMessage(ec, false);
    messages.push({ name, id, group: group.id(), envelope: envelopeOut(ec) });
  };
  for (const [name, make] of Object.entries(referenceContent)) push(groups[0], make(), name);
  for (const [i, e] of (input.custom || []).entries()) push(groups[1], envelopeIn(e), `custom${i}`);
  const consent = [
    { entityType: b.ConsentEntityType.InboxId, state: b.ConsentState.Denied, entity: 'a'.repeat(64) },
    { entityType: b.ConsentEntityType.GroupId, state: b.ConsentState.Allowed, entity: groups[1].id() },
  ];
  await client.setConsentStates(consent);
  const archive = await client.device_sync().createArchive(
    { elements: [b.BackupElementSelectionOption.Messages, b.BackupElementSelectionOption.Consent], excludeDisappearingMessages: false },
    unhex(input.key));
  return { archive: hex(archive), inboxId: client.inboxId, groups: groups.map((g) => g.id()), messages, consent };
}

async function importArchive(input) {
  return importInto(await offlineClient(9), input);
}

// importEach imports input.archives in turn, each into a fresh client,
// writing one line per archive as it finishes: its view, or {error}. A
// panic in the wasm module ends the process; the caller knows which
// archive did it from the lines written before.
async function importEach(input) {
  for (const a of input.archives) {
    let line;
    try {
      line = await importInto(await offlineClient(9), { key: input.key, ...a });
    } catch (e) {
      line = { error: String(e?.message ?? e) };
    }
    await new Promise((resolve) => process.stdout.write(json(line) + '\n', resolve));
  }
  return null;
}

// importChain imports input.archives ({key, archive} each) in turn into
// one fresh client, as a chain's members restored one after another, and
// returns the view after the last.
async function importChain(input) {
  const client = await offlineClient(9);
  const members = input.archives;
  for (const a of members.slice(0, -1)) {
    await client.device_sync().importArchive(unhex(a.archive), unhex(a.key));
  }
  return importInto(client, members[members.length - 1]);
}

async function importInto(client, input) {
  const sync = client.device_sync();
  const data = unhex(input.archive);
  const key = unhex(input.key);
  const metadata = await sync.archiveMetadata(data, key);
  await sync.importArchive(data, key);
  const conversations = [];
  const messages = [];
  // Every conversation the import stored: list's defaults hide those
  // whose consent is Denied and all but one DM of a pair.
  const every = { consentStates: [b.ConsentState.Unknown, b.ConsentState.Allowed, b.ConsentState.Denied], includeDuplicateDms: true };
  const seen = new Set();
  for (const item of client.conversations().list(every)) {
    const conv = item.conversation ?? item;
    if (seen.has(conv.id())) continue; // a DM listed as itself and as a duplicate
    seen.add(conv.id());
    conversations.push({ id: conv.id(), membershipState: conv.membershipState(), name: safe(() => conv.groupName()),
      disappearing: safe(() => { const d = conv.messageDisappearingSettings(); return d ? { fromNs: String(d.fromNs), inNs: String(d.inNs) } : null; }) });
    for (const m of await conv.findMessages({})) {
      // A DM the reference stitches to another lists the other's messages too.
      if (messages.some((x) => x.id === m.id)) continue;
      messages.push({ id: m.id, convoId: m.convoId, kind: m.kind, sentAtNs: m.sentAtNs, envelope: envelopeOut(m.content) });
    }
    for (const d of await conv.findEnrichedMessages({})) {
      const m = messages.find((x) => x.id === d.id);
      if (m) { m.decodedType = d.content?.type; m.contentType = d.contentType; }
    }
    // The type each message is filed under in the reference's database
    // (what a contentTypes filter finds it by), as ContentType names.
    for (const [name, value] of Object.entries(b.ContentType)) {
      if (typeof value !== 'number') continue;
      for (const f of await conv.findMessages({ contentTypes: [value] })) {
        const m = messages.find((x) => x.id === f.id);
        if (m && !(m.listedAs ??= []).includes(name)) m.listedAs.push(name);
      }
    }
  }
  const consent = [];
  for (const c of input.consent || []) {
    consent.push({ ...c, state: await client.getConsentState(c.entityType, c.entity) });
  }
  return { metadata, inboxId: client.inboxId, conversations, messages, consent };
}

function safe(f) { try { return f(); } catch { return undefined; } }

// history drives a history server as the reference's device sync does
// (libxmtp xmtp_archive post_to_url, then the receiver's GET of the URL).
// The reference's own sendSyncArchive is tried first: offline it stops
// before its upload, waiting for the network to echo the sync group's
// commit, and what it said is returned as deviceSync.
async function history(input) {
  historyURL = input.url;
  const sender = await offlineClient(7);
  const group = sender.conversations().createGroupOptimistic({ groupName: 'History group' });
  group.prepareMessage(b.encodeText('synced through a history server'), false);
  group.prepareMessage(b.encodeMarkdown('*and a second message*'), false);
  const options = { elements: [b.BackupElementSelectionOption.Messages, b.BackupElementSelectionOption.Consent], excludeDisappearingMessages: false };
  let deviceSync;
  try {
    await Promise.race([
      sender.device_sync().sendSyncArchive(options, input.url, '1234'),
      new Promise((_, reject) => setTimeout(() => reject(new Error('no answer in 20 s')), 20000)),
    ]);
    deviceSync = { sent: true };
  } catch (e) {
    deviceSync = { error: String(e?.message ?? e) };
  }
  const archive = await sender.device_sync().createArchive(options, unhex(input.key));
  // post_to_url: POST, the archive as the raw body, no other header; a
  // status that is not a success fails it; the answer's text is the id.
  const up = await fetch(`${input.url}/upload`, { method: 'POST', body: archive });
  const id = await up.text();
  if (!up.ok) return { status: up.status, id, deviceSync };
  // The receiver: GET of the URL the reply carries, error_for_status.
  const down = await fetch(`${input.url}/files/${id}`);
  if (!down.ok) return { id, downloadStatus: down.status, deviceSync };
  const data = new Uint8Array(await down.arrayBuffer());
  const view = await importInto(await offlineClient(9), { key: input.key, archive: hex(data) });
  return { id, uploaded: archive.length, downloaded: data.length, same: Buffer.compare(Buffer.from(archive), Buffer.from(data)) === 0, view, deviceSync };
}

const input = JSON.parse(fs.readFileSync(0, 'utf8') || '{}');
const commands = { create, import: importArchive, 'import-each': importEach, 'import-chain': importChain, history };
const cmd = commands[process.argv[2]];
if (!cmd) {
  console.error('usage: node archive.mjs create|import < input.json');
  process.exit(2);
}
// The client's background tasks would keep Node alive: exit once written.
const result = await cmd(input);
process.stdout.write(result === null ? '' : json(result) + '\n', () => process.exit(0));
