// The k6 compat scenario: every S3 operation the other clients exercise, sent as raw HTTP and
// signed by lib/sigv4.js. One VU, one iteration; any failed check fails the run (threshold).
//
// PHASE=main (default): create bucket, small object with metadata, 20 MiB multipart, listings
//   with pagination, HEAD, GET, copy with REPLACE, deletes, tricky keys, key length limits.
//   setup() leaves one object and returns a presigned GET URL for the Rust test to fetch with
//   curl; it lands in the summary file.
// PHASE=cleanup: delete that object and the bucket.
//
// Env: S3_ENDPOINT, S3_ACCESS_KEY, S3_SECRET_KEY, S3_REGION, BUCKET, SUMMARY_PATH,
//      PAGINATION_KEYS (default 1050), TRICKY_KEYS_JSON (JSON array of keys).
import { check, fail, group } from 'k6';
import http from 'k6/http';
import crypto from 'k6/crypto';
import {
  configFromEnv,
  md5Base64,
  md5Hex,
  objectPath,
  presignUrl,
  s3Request,
  signedRequest,
  xmlAll,
  xmlCommonPrefixes,
  xmlEscape,
  xmlFirst,
} from './lib/sigv4.js';

const cfg = configFromEnv();
const BUCKET = __ENV.BUCKET || 'k6-compat';
const PHASE = __ENV.PHASE || 'main';
const PAGINATION_KEYS = Number(__ENV.PAGINATION_KEYS || 1050);
const TRICKY_KEYS = JSON.parse(__ENV.TRICKY_KEYS_JSON || '[]');
const PRESIGN_KEY = 'presign/object.txt';
const PRESIGN_BODY = 'presigned body from k6\n';
const MIB = 1024 * 1024;

export const options = {
  vus: 1,
  iterations: 1,
  // A failed check must fail the process: k6 exits 99 when a threshold is crossed.
  thresholds: { checks: ['rate==1.0'] },
  setupTimeout: '120s',
};

function status(res, expected, name) {
  const ok = check(res, { [name]: (r) => r.status === expected });
  if (!ok) {
    console.error(name + ': HTTP ' + res.status + ' ' + String(res.body).slice(0, 400));
  }
  return ok;
}

export function setup() {
  if (PHASE !== 'main') {
    return {};
  }
  const created = s3Request(cfg, 'PUT', objectPath(BUCKET));
  if (created.status !== 200) {
    fail('CreateBucket ' + BUCKET + ': HTTP ' + created.status + ' ' + created.body);
  }
  const put = s3Request(cfg, 'PUT', objectPath(BUCKET, PRESIGN_KEY), {
    body: PRESIGN_BODY,
    headers: { 'content-type': 'text/plain' },
  });
  if (put.status !== 200) {
    fail('PutObject ' + PRESIGN_KEY + ': HTTP ' + put.status + ' ' + put.body);
  }
  return {
    presignedUrl: presignUrl(cfg, 'GET', objectPath(BUCKET, PRESIGN_KEY), 300),
    presignedMd5: md5Hex(PRESIGN_BODY),
  };
}

export default function () {
  if (PHASE === 'cleanup') {
    cleanup();
    return;
  }
  group('bucket', bucketChecks);
  group('small object', smallObject);
  group('multipart 20 MiB', multipart);
  group('pagination', pagination);
  group('copy with REPLACE', copyReplace);
  group('tricky keys', trickyKeys);
  group('key length', keyLength);
}

function bucketChecks() {
  const head = s3Request(cfg, 'HEAD', objectPath(BUCKET));
  status(head, 200, 'HeadBucket 200');
  const again = s3Request(cfg, 'PUT', objectPath(BUCKET));
  // AWS answers the owner's repeated CreateBucket with 409 BucketAlreadyOwnedByYou, or 200 in
  // us-east-1 for legacy reasons; either is accepted.
  check(again, {
    'CreateBucket again is 409 BucketAlreadyOwnedByYou (or legacy 200)': (r) =>
      r.status === 200 || (r.status === 409 && xmlFirst(r.body, 'Code') === 'BucketAlreadyOwnedByYou'),
  });
  const location = s3Request(cfg, 'GET', objectPath(BUCKET), { query: { location: '' } });
  check(location, {
    'GetBucketLocation 200 with LocationConstraint': (r) =>
      r.status === 200 && String(r.body).indexOf('LocationConstraint') >= 0,
  });
  const buckets = s3Request(cfg, 'GET', '/');
  check(buckets, {
    'ListBuckets lists the bucket': (r) => r.status === 200 && xmlAll(r.body, 'Name').indexOf(BUCKET) >= 0,
  });
}

function smallObject() {
  const key = 'docs/hello.txt';
  const body = 'hello from k6, with metadata\n';
  const put = s3Request(cfg, 'PUT', objectPath(BUCKET, key), {
    body: body,
    headers: { 'content-type': 'text/plain; charset=utf-8', 'x-amz-meta-color': 'blue', 'content-md5': md5Base64(body) },
  });
  status(put, 200, 'PutObject small 200');
  check(put, { 'PutObject ETag is the MD5': (r) => r.headers['Etag'] === '"' + md5Hex(body) + '"' });
  const head = s3Request(cfg, 'HEAD', objectPath(BUCKET, key));
  status(head, 200, 'HeadObject 200');
  check(head, {
    'HeadObject Content-Length': (r) => r.headers['Content-Length'] === String(body.length),
    'HeadObject Content-Type': (r) => r.headers['Content-Type'] === 'text/plain; charset=utf-8',
    'HeadObject x-amz-meta-color': (r) => r.headers['X-Amz-Meta-Color'] === 'blue',
  });
  const get = s3Request(cfg, 'GET', objectPath(BUCKET, key));
  check(get, { 'GetObject returns the bytes': (r) => r.status === 200 && r.body === body });
  const range = s3Request(cfg, 'GET', objectPath(BUCKET, key), { headers: { range: 'bytes=0-4' } });
  check(range, { 'GetObject Range 206': (r) => r.status === 206 && r.body === 'hello' });
  const bad = s3Request(cfg, 'PUT', objectPath(BUCKET, 'docs/bad-md5'), {
    body: body,
    headers: { 'content-md5': md5Base64('something else') },
  });
  check(bad, { 'PutObject with a wrong Content-MD5 is 400 BadDigest': (r) => r.status === 400 && xmlFirst(r.body, 'Code') === 'BadDigest' });
  const missing = s3Request(cfg, 'GET', objectPath(BUCKET, 'docs/missing'));
  check(missing, { 'GetObject missing is 404 NoSuchKey': (r) => r.status === 404 && xmlFirst(r.body, 'Code') === 'NoSuchKey' });
  const del = s3Request(cfg, 'DELETE', objectPath(BUCKET, key));
  status(del, 204, 'DeleteObject 204');
  const gone = s3Request(cfg, 'HEAD', objectPath(BUCKET, key));
  status(gone, 404, 'HeadObject after delete 404');
}

function partBody(index, size) {
  // Distinct, deterministic ASCII content per part.
  const line = 'part ' + index + ' of the k6 multipart upload. ';
  return line.repeat(Math.ceil(size / line.length)).slice(0, size);
}

function concatBuffers(buffers) {
  let total = 0;
  for (const b of buffers) total += b.byteLength;
  const out = new Uint8Array(total);
  let at = 0;
  for (const b of buffers) {
    out.set(new Uint8Array(b), at);
    at += b.byteLength;
  }
  return out.buffer;
}

function multipart() {
  const key = 'big/twenty-mib.bin';
  const path = objectPath(BUCKET, key);
  const sizes = [8 * MIB, 8 * MIB, 4 * MIB];
  const create = s3Request(cfg, 'POST', path, { query: { uploads: '' }, headers: { 'x-amz-meta-kind': 'multipart' } });
  if (!status(create, 200, 'CreateMultipartUpload 200')) return;
  const uploadId = xmlFirst(create.body, 'UploadId');
  check(uploadId, { 'CreateMultipartUpload returns an UploadId': (u) => !!u });
  const etags = [];
  const digests = [];
  let full = '';
  for (let i = 0; i < sizes.length; i++) {
    const body = partBody(i + 1, sizes[i]);
    full += body;
    digests.push(crypto.md5(body, 'binary'));
    const part = s3Request(cfg, 'PUT', path, { query: { partNumber: String(i + 1), uploadId: uploadId }, body: body, timeout: '120s' });
    status(part, 200, 'UploadPart ' + (i + 1) + ' 200');
    etags.push(part.headers['Etag']);
  }
  const xml =
    '<CompleteMultipartUpload>' +
    etags.map((e, i) => '<Part><PartNumber>' + (i + 1) + '</PartNumber><ETag>' + e + '</ETag></Part>').join('') +
    '</CompleteMultipartUpload>';
  const done = s3Request(cfg, 'POST', path, { query: { uploadId: uploadId }, body: xml, timeout: '120s' });
  status(done, 200, 'CompleteMultipartUpload 200');
  const bufs = digests.map((d) => (d instanceof ArrayBuffer ? d : new Uint8Array(d).buffer));
  const expectedEtag = '"' + crypto.md5(concatBuffers(bufs), 'hex') + '-' + sizes.length + '"';
  check(done, { 'CompleteMultipartUpload ETag is md5(part md5s)-3': (r) => xmlFirst(r.body, 'ETag') === expectedEtag });
  const head = s3Request(cfg, 'HEAD', path);
  check(head, {
    'HeadObject multipart size 20 MiB': (r) => r.status === 200 && r.headers['Content-Length'] === String(20 * MIB),
    'HeadObject multipart metadata kept': (r) => r.headers['X-Amz-Meta-Kind'] === 'multipart',
  });
  const get = s3Request(cfg, 'GET', path, { timeout: '120s' });
  check(get, { 'GetObject multipart bytes match': (r) => r.status === 200 && md5Hex(r.body) === md5Hex(full) });
  status(s3Request(cfg, 'DELETE', path), 204, 'DeleteObject multipart 204');
}

function paginationKeys() {
  const keys = [];
  for (let i = 0; i < PAGINATION_KEYS; i++) {
    keys.push('page/' + String(i % 7).padStart(2, '0') + '/obj-' + String(i).padStart(5, '0'));
  }
  return keys.sort();
}

function listAllV2(prefix, delimiter, maxKeys) {
  const keys = [];
  const prefixes = [];
  let token = null;
  let pages = 0;
  for (let guard = 0; guard < 10000; guard++) {
    const query = { 'list-type': '2', prefix: prefix, 'max-keys': String(maxKeys) };
    if (delimiter) query.delimiter = delimiter;
    if (token) query['continuation-token'] = token;
    const res = s3Request(cfg, 'GET', objectPath(BUCKET), { query: query });
    if (res.status !== 200) {
      return { error: 'HTTP ' + res.status + ' ' + res.body };
    }
    pages++;
    keys.push(...xmlAll(res.body, 'Key'));
    prefixes.push(...xmlCommonPrefixes(res.body));
    const truncated = xmlFirst(res.body, 'IsTruncated') === 'true';
    token = xmlFirst(res.body, 'NextContinuationToken');
    if (!truncated) break;
    if (!token) return { error: 'IsTruncated without NextContinuationToken' };
  }
  return { keys: keys, prefixes: prefixes, pages: pages };
}

function listAllV1(prefix, maxKeys) {
  const keys = [];
  let marker = '';
  let pages = 0;
  for (let guard = 0; guard < 10000; guard++) {
    const query = { prefix: prefix, 'max-keys': String(maxKeys) };
    if (marker) query.marker = marker;
    const res = s3Request(cfg, 'GET', objectPath(BUCKET), { query: query });
    if (res.status !== 200) return { error: 'HTTP ' + res.status + ' ' + res.body };
    pages++;
    const page = xmlAll(res.body, 'Key');
    keys.push(...page);
    if (xmlFirst(res.body, 'IsTruncated') !== 'true') break;
    // Without a delimiter NextMarker is optional: continue from the last key.
    marker = xmlFirst(res.body, 'NextMarker') || page[page.length - 1];
  }
  return { keys: keys, pages: pages };
}

function pagination() {
  const keys = paginationKeys();
  // Upload in batches of 32 concurrent requests to keep the seed phase short.
  for (let i = 0; i < keys.length; i += 32) {
    const batch = keys.slice(i, i + 32).map((k) => signedRequest(cfg, 'PUT', objectPath(BUCKET, k), { body: k }));
    const responses = http.batch(batch);
    const failed = responses.filter((r) => r.status !== 200);
    check(failed, { 'seed PUT batch all 200': (f) => f.length === 0 });
  }
  const v2 = listAllV2('page/', '', 250);
  check(v2, {
    'ListObjectsV2 max-keys=250 returns every key in order': (r) => !r.error && JSON.stringify(r.keys) === JSON.stringify(keys),
    'ListObjectsV2 max-keys=250 takes ceil(N/250) pages': (r) => r.pages === Math.ceil(keys.length / 250),
  });
  if (v2.error) console.error('ListObjectsV2: ' + v2.error);
  const rolled = listAllV2('page/', '/', 3);
  check(rolled, {
    'ListObjectsV2 delimiter rolls up to 7 prefixes': (r) =>
      !r.error && JSON.stringify(r.prefixes) === JSON.stringify(['page/00/', 'page/01/', 'page/02/', 'page/03/', 'page/04/', 'page/05/', 'page/06/']) && r.keys.length === 0,
    'ListObjectsV2 delimiter pages count prefixes as entries': (r) => r.pages === 3,
  });
  const v1 = listAllV1('page/', 100);
  check(v1, {
    'ListObjects v1 max-keys=100 returns every key in order': (r) => !r.error && JSON.stringify(r.keys) === JSON.stringify(keys),
  });
  // Batch delete, at most 1000 keys per request.
  let deleted = 0;
  for (let i = 0; i < keys.length; i += 1000) {
    const chunk = keys.slice(i, i + 1000);
    const xml = '<Delete>' + chunk.map((k) => '<Object><Key>' + xmlEscape(k) + '</Key></Object>').join('') + '</Delete>';
    const res = s3Request(cfg, 'POST', objectPath(BUCKET), { query: { delete: '' }, body: xml, headers: { 'content-md5': md5Base64(xml) } });
    status(res, 200, 'DeleteObjects 200');
    deleted += xmlAll(res.body, 'Deleted').length;
  }
  check(deleted, { 'DeleteObjects reports every key deleted': (d) => d === keys.length });
  const after = listAllV2('page/', '', 1000);
  check(after, { 'listing after DeleteObjects is empty': (r) => !r.error && r.keys.length === 0 });
}

function copyReplace() {
  const src = 'copy/source.txt';
  const dst = 'copy/dest.json';
  const body = '{"copied": true}';
  status(
    s3Request(cfg, 'PUT', objectPath(BUCKET, src), { body: body, headers: { 'content-type': 'text/plain', 'x-amz-meta-color': 'blue' } }),
    200,
    'PutObject copy source 200',
  );
  const copy = s3Request(cfg, 'PUT', objectPath(BUCKET, dst), {
    headers: {
      'x-amz-copy-source': objectPath(BUCKET, src),
      'x-amz-metadata-directive': 'REPLACE',
      'x-amz-meta-color': 'red',
      'content-type': 'application/json',
    },
  });
  check(copy, { 'CopyObject REPLACE 200 with CopyObjectResult': (r) => r.status === 200 && String(r.body).indexOf('CopyObjectResult') >= 0 });
  const head = s3Request(cfg, 'HEAD', objectPath(BUCKET, dst));
  check(head, {
    'copied object has the replaced metadata': (r) => r.headers['X-Amz-Meta-Color'] === 'red',
    'copied object has the replaced content type': (r) => r.headers['Content-Type'] === 'application/json',
    'copied object has the source ETag': (r) => r.headers['Etag'] === '"' + md5Hex(body) + '"',
  });
  const self = s3Request(cfg, 'PUT', objectPath(BUCKET, src), {
    headers: { 'x-amz-copy-source': objectPath(BUCKET, src), 'x-amz-metadata-directive': 'REPLACE', 'x-amz-meta-mtime': '1700000000' },
  });
  status(self, 200, 'CopyObject onto itself with REPLACE 200');
  const selfHead = s3Request(cfg, 'HEAD', objectPath(BUCKET, src));
  check(selfHead, { 'self-copy replaced the metadata': (r) => r.headers['X-Amz-Meta-Mtime'] === '1700000000' && !r.headers['X-Amz-Meta-Color'] });
  for (const k of [src, dst]) {
    status(s3Request(cfg, 'DELETE', objectPath(BUCKET, k)), 204, 'DeleteObject copy ' + k);
  }
}

function trickyKeys() {
  for (const key of TRICKY_KEYS) {
    const body = key.endsWith('/') ? '' : key;
    status(s3Request(cfg, 'PUT', objectPath(BUCKET, key), { body: body }), 200, 'PutObject tricky key');
    const get = s3Request(cfg, 'GET', objectPath(BUCKET, key));
    if (!check(get, { 'GetObject tricky key returns its body': (r) => r.status === 200 && (r.body || '') === body })) {
      console.error('tricky key failed: ' + JSON.stringify(key) + ' HTTP ' + get.status);
    }
  }
  const listed = listAllV2('', '', 1000);
  const expected = TRICKY_KEYS.slice().sort(compareUtf8);
  const listedTricky = (listed.keys || []).filter((k) => TRICKY_KEYS.indexOf(k) >= 0 || k === PRESIGN_KEY);
  check(listedTricky, {
    'ListObjectsV2 returns every tricky key in UTF-8 byte order': (l) =>
      JSON.stringify(l.filter((k) => k !== PRESIGN_KEY)) === JSON.stringify(expected),
  });
  for (const key of TRICKY_KEYS) {
    status(s3Request(cfg, 'DELETE', objectPath(BUCKET, key)), 204, 'DeleteObject tricky key');
  }
}

// S3 orders keys by UTF-8 bytes; JS compares UTF-16 code units, which differs for astral chars.
function compareUtf8(a, b) {
  const ea = unescape(encodeURIComponent(a));
  const eb = unescape(encodeURIComponent(b));
  return ea < eb ? -1 : ea > eb ? 1 : 0;
}

function keyLength() {
  // Segments of 200 bytes (MinIO, behind the gateway in upstream mode, refuses longer ones).
  let longest = 'long';
  while (longest.length < 1024) longest += longest.length % 201 === 4 && longest.length + 2 < 1024 ? '/' : 'k';
  const tooLong = longest + 'k';
  status(s3Request(cfg, 'PUT', objectPath(BUCKET, longest), { body: 'x' }), 200, 'PutObject 1024-byte key 200');
  const rejected = s3Request(cfg, 'PUT', objectPath(BUCKET, tooLong), { body: 'x' });
  check(rejected, { 'PutObject 1025-byte key is 400 KeyTooLongError': (r) => r.status === 400 && xmlFirst(r.body, 'Code') === 'KeyTooLongError' });
  status(s3Request(cfg, 'DELETE', objectPath(BUCKET, longest)), 204, 'DeleteObject 1024-byte key 204');
}

function cleanup() {
  const notEmpty = s3Request(cfg, 'DELETE', objectPath(BUCKET));
  check(notEmpty, { 'DeleteBucket non-empty is 409 BucketNotEmpty': (r) => r.status === 409 && xmlFirst(r.body, 'Code') === 'BucketNotEmpty' });
  status(s3Request(cfg, 'DELETE', objectPath(BUCKET, PRESIGN_KEY)), 204, 'DeleteObject presign object 204');
  status(s3Request(cfg, 'DELETE', objectPath(BUCKET)), 204, 'DeleteBucket 204');
  status(s3Request(cfg, 'HEAD', objectPath(BUCKET)), 404, 'HeadBucket after delete 404');
}

function collectChecks(group, out) {
  for (const c of group.checks || []) {
    out.push({ name: (group.path || '') + ' :: ' + c.name, passes: c.passes, fails: c.fails });
  }
  for (const g of group.groups || []) {
    collectChecks(g, out);
  }
  return out;
}

export function handleSummary(data) {
  const out = {
    setup: data.setup_data || {},
    checks: collectChecks(data.root_group, []),
  };
  const files = {};
  files[__ENV.SUMMARY_PATH || 'summary.json'] = JSON.stringify(out, null, 1);
  return files;
}
