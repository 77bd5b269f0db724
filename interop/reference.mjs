// Runs the reference client's standalone codecs (libxmtp through
// @xmtp/wasm-bindings) for the Go interoperability tests.
//
//   node reference.mjs encode    prints {"name": envelope, ...} for fixed values
//   node reference.mjs golden    the same for the codec's golden vectors' values
//   node reference.mjs encrypt   prints the reference's encryption of a fixed attachment
//   node reference.mjs decrypt   reads {payload, remote} on stdin, prints the attachment
//
// Bytes travel as lowercase hex; the values here are mirrored, case by case,
// in interop_test.go.
import fs from 'node:fs';
import * as b from '@xmtp/wasm-bindings';

const wasm = new URL('./node_modules/@xmtp/wasm-bindings/dist/bindings_wasm_bg.wasm', import.meta.url);
b.initSync({ module: fs.readFileSync(wasm) });

const hex = (u8) => Buffer.from(u8).toString('hex');
const unhex = (s) => new Uint8Array(Buffer.from(s, 'hex'));
const fill = (n, v) => new Uint8Array(n).fill(v);

function envelope(ec) {
  return {
    type: ec.type,
    parameters: ec.parameters instanceof Map ? Object.fromEntries(ec.parameters) : ec.parameters,
    fallback: ec.fallback,
    compression: ec.compression,
    content: hex(ec.content),
  };
}

const remote = {
  url: 'https://files.example.com/object/1',
  contentDigest: 'ab'.repeat(32),
  secret: fill(32, 1), salt: fill(32, 2), nonce: fill(12, 3),
  scheme: 'https://', contentLength: 1234, filename: 'photo.jpg',
};

const cases = {
  text: () => b.encodeText('Hello, interop ✓'),
  markdown: () => b.encodeMarkdown('# Heading\n\n*emphasis*'),
  reaction_added: () => b.encodeReaction({ reference: 'abc123', referenceInboxId: '', action: b.ReactionAction.Added, content: '👍', schema: b.ReactionSchema.Unicode }),
  reaction_removed: () => b.encodeReaction({ reference: 'abc123', referenceInboxId: 'inbox-1', action: b.ReactionAction.Removed, content: ':thumbsup:', schema: b.ReactionSchema.Shortcode }),
  read_receipt: () => b.encodeReadReceipt({}),
  attachment: () => b.encodeAttachment({ filename: 'notes.txt', mimeType: 'text/plain', content: new TextEncoder().encode('attached bytes') }),
  attachment_unnamed: () => b.encodeAttachment({ mimeType: 'application/octet-stream', content: fill(5, 9) }),
  remote_attachment: () => b.encodeRemoteAttachment(remote),
  multi_remote_attachment: () => b.encodeMultiRemoteAttachment({ attachments: [remote, { ...remote, url: 'https://files.example.com/object/2', filename: 'second.png', contentLength: 99 }] }),
  transaction_reference: () => b.encodeTransactionReference({
    namespace: 'eip155', networkId: '8453', reference: '0xfeedbeef',
    metadata: { transactionType: 'transfer', currency: 'USDC', amount: 100000.5, decimals: 6, fromAddress: '0xfrom', toAddress: '0xto' },
  }),
  transaction_reference_min: () => b.encodeTransactionReference({ networkId: '1', reference: '0xabc' }),
  wallet_send_calls: () => b.encodeWalletSendCalls({
    version: '1.0', chainId: '0x2105', from: '0xfrom',
    calls: [{ to: '0xto', data: '0xdata', value: '0x1', gas: '0x5208', metadata: { description: 'Send 1 USDC', transactionType: 'transfer', currency: 'USDC' } }],
    capabilities: { paymasterService: 'https://paymaster.example' },
  }),
  actions: () => b.encodeActions({
    id: 'menu-1', description: 'Choose one',
    actions: [
      { id: 'yes', label: 'Yes', imageUrl: 'https://img.example/yes.png', style: b.ActionStyle.Primary, expiresAtNs: 1700000000123000000n },
      { id: 'no', label: 'No', style: b.ActionStyle.Danger },
    ],
    expiresAtNs: 1700000000000000000n,
  }),
  intent: () => b.encodeIntent({ id: 'menu-1', actionId: 'yes', metadata: { count: 2, note: 'x', ok: true } }),
};

// The codec's golden vectors (internal/codec/testdata/reference-vectors.json)
// that the bindings can encode, by the vectors' names.
const golden = {
  'text Hello, World!': () => b.encodeText('Hello, World!'),
  'text hello': () => b.encodeText('hello'),
  'read receipt': () => b.encodeReadReceipt({}),
  'reaction 2.0 added': () => b.encodeReaction({ reference: 'abc', referenceInboxId: '', action: b.ReactionAction.Added, content: '👍', schema: b.ReactionSchema.Unicode }),
  'reaction 2.0 removed shortcode: content': () => b.encodeReaction({ reference: 'abc', referenceInboxId: 'inbox1', action: b.ReactionAction.Removed, content: ':thumbsup:', schema: b.ReactionSchema.Shortcode }),
  'intent: content': () => b.encodeIntent({ id: 'a1', actionId: 'y' }),
};

const mode = process.argv[2];
let out;
if (mode === 'encode') {
  out = {};
  for (const [name, f] of Object.entries(cases)) out[name] = envelope(f());
} else if (mode === 'golden') {
  out = {};
  for (const [name, f] of Object.entries(golden)) out[name] = envelope(f());
} else if (mode === 'encrypt') {
  const e = b.encryptAttachment({ filename: 'ref.bin', mimeType: 'application/octet-stream', content: new TextEncoder().encode('encrypted by the reference') });
  out = { payload: hex(e.payload), contentDigest: e.contentDigest, secret: hex(e.secret), salt: hex(e.salt), nonce: hex(e.nonce), contentLength: e.contentLength, filename: e.filename };
} else if (mode === 'decrypt') {
  const req = JSON.parse(fs.readFileSync(0, 'utf8'));
  const a = b.decryptAttachment(unhex(req.payload), {
    url: req.url, contentDigest: req.contentDigest, secret: unhex(req.secret), salt: unhex(req.salt), nonce: unhex(req.nonce),
    scheme: req.scheme, contentLength: req.contentLength, filename: req.filename,
  });
  out = { filename: a.filename, mimeType: a.mimeType, content: hex(a.content) };
} else {
  console.error('usage: node reference.mjs encode|encrypt|decrypt');
  process.exit(2);
}
process.stdout.write(JSON.stringify(out, (_, v) => (typeof v === 'bigint' ? v.toString() : v)));
