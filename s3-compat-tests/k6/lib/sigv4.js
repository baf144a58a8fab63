// AWS Signature Version 4 for S3, written against k6/crypto (no remote jslib modules).
//
// Used by the compat scenario (k6/compat.js) and the load scenarios (k6/load.js).
// Path-style addressing only: http://HOST/BUCKET/KEY.
//
// Canonical request (AWS SigV4 documentation):
//   METHOD \n URI-encoded path (each segment encoded once, '/' kept) \n sorted, encoded query \n
//   lowercased, trimmed, sorted headers "name:value\n" \n signed header names ";"-joined \n
//   payload hash (hex sha256 of the body, or UNSIGNED-PAYLOAD)
import crypto from 'k6/crypto';
import http from 'k6/http';

const ALGORITHM = 'AWS4-HMAC-SHA256';
export const UNSIGNED_PAYLOAD = 'UNSIGNED-PAYLOAD';

// k6 returns "binary" digests as an ArrayBuffer (newer releases) or an array of bytes (older).
function toBuffer(value) {
  if (value instanceof ArrayBuffer) {
    return value;
  }
  return new Uint8Array(value).buffer;
}

function hmac(key, data) {
  return toBuffer(crypto.hmac('sha256', key, data, 'binary'));
}

function hmacHex(key, data) {
  return crypto.hmac('sha256', key, data, 'hex');
}

export function sha256Hex(data) {
  return crypto.sha256(data, 'hex');
}

export function md5Hex(data) {
  return crypto.md5(data, 'hex');
}

export function md5Base64(data) {
  return crypto.md5(data, 'base64');
}

// RFC 3986 encoding as SigV4 wants it: everything but A-Z a-z 0-9 - _ . ~ is %XX (UTF-8).
export function uriEncode(text, keepSlash) {
  const encoded = encodeURIComponent(text).replace(
    /[!'()*]/g,
    (c) => '%' + c.charCodeAt(0).toString(16).toUpperCase(),
  );
  return keepSlash ? encoded.replace(/%2F/g, '/') : encoded;
}

// "/bucket/key" with each segment encoded; the same string is sent and signed.
export function objectPath(bucket, key) {
  if (key === undefined || key === '') {
    return '/' + uriEncode(bucket, false);
  }
  return '/' + uriEncode(bucket, false) + '/' + uriEncode(key, true);
}

function canonicalQuery(query) {
  return Object.keys(query)
    .sort()
    .map((name) => uriEncode(name, false) + '=' + uriEncode(String(query[name]), false))
    .join('&');
}

function amzDate(now) {
  // 20261122T054500Z
  return now.toISOString().replace(/[:-]/g, '').replace(/\.\d{3}/, '');
}

function signingKey(secret, date, region) {
  const kDate = hmac('AWS4' + secret, date);
  const kRegion = hmac(kDate, region);
  const kService = hmac(kRegion, 's3');
  return hmac(kService, 'aws4_request');
}

// Sign a request. Returns the headers to send (including Authorization).
//   cfg: {endpoint, accessKey, secretKey, region}
//   req: {method, path, query: {}, headers: {}, body, payloadHash}
// signedRequest/s3Request opts: {query, headers, body, payloadHash, tags, responseType, timeout,
//   expectedStatuses: [200, 404, ...]}
export function signHeaders(cfg, req, now) {
  now = now || new Date();
  const stamp = amzDate(now);
  const date = stamp.slice(0, 8);
  const host = cfg.endpoint.replace(/^https?:\/\//, '').replace(/\/.*$/, '');
  const payloadHash = req.payloadHash || sha256Hex(req.body === undefined ? '' : req.body);
  const headers = Object.assign({}, req.headers || {});
  headers['host'] = host;
  headers['x-amz-date'] = stamp;
  headers['x-amz-content-sha256'] = payloadHash;
  const names = Object.keys(headers)
    .map((n) => n.toLowerCase())
    .sort();
  const lower = {};
  for (const name of Object.keys(headers)) {
    lower[name.toLowerCase()] = String(headers[name]).trim().replace(/\s+/g, ' ');
  }
  const canonicalHeaders = names.map((n) => n + ':' + lower[n] + '\n').join('');
  const signedHeaders = names.join(';');
  const canonicalRequest = [
    req.method,
    req.path,
    canonicalQuery(req.query || {}),
    canonicalHeaders,
    signedHeaders,
    payloadHash,
  ].join('\n');
  const scope = date + '/' + cfg.region + '/s3/aws4_request';
  const stringToSign = [ALGORITHM, stamp, scope, sha256Hex(canonicalRequest)].join('\n');
  const signature = hmacHex(signingKey(cfg.secretKey, date, cfg.region), stringToSign);
  const out = {};
  for (const name of Object.keys(headers)) {
    if (name.toLowerCase() !== 'host') {
      out[name] = headers[name];
    }
  }
  out['Authorization'] =
    ALGORITHM +
    ' Credential=' + cfg.accessKey + '/' + scope +
    ', SignedHeaders=' + signedHeaders +
    ', Signature=' + signature;
  return out;
}

// A presigned URL (query-string SigV4, only the host header signed, UNSIGNED-PAYLOAD).
export function presignUrl(cfg, method, path, expiresSeconds, now) {
  now = now || new Date();
  const stamp = amzDate(now);
  const date = stamp.slice(0, 8);
  const host = cfg.endpoint.replace(/^https?:\/\//, '').replace(/\/.*$/, '');
  const scope = date + '/' + cfg.region + '/s3/aws4_request';
  const query = {
    'X-Amz-Algorithm': ALGORITHM,
    'X-Amz-Credential': cfg.accessKey + '/' + scope,
    'X-Amz-Date': stamp,
    'X-Amz-Expires': String(expiresSeconds),
    'X-Amz-SignedHeaders': 'host',
  };
  const canonicalRequest = [
    method,
    path,
    canonicalQuery(query),
    'host:' + host + '\n',
    'host',
    UNSIGNED_PAYLOAD,
  ].join('\n');
  const stringToSign = [ALGORITHM, stamp, scope, sha256Hex(canonicalRequest)].join('\n');
  const signature = hmacHex(signingKey(cfg.secretKey, date, cfg.region), stringToSign);
  return cfg.endpoint + path + '?' + canonicalQuery(query) + '&X-Amz-Signature=' + signature;
}

// Build (without sending) a signed request in the form http.batch() takes.
export function signedRequest(cfg, method, path, opts) {
  opts = opts || {};
  const query = opts.query || {};
  const body = opts.body === undefined ? '' : opts.body;
  const headers = signHeaders(cfg, {
    method: method,
    path: path,
    query: query,
    headers: opts.headers,
    body: body,
    payloadHash: opts.payloadHash,
  });
  const qs = canonicalQuery(query);
  const url = cfg.endpoint + path + (qs ? '?' + qs : '');
  const params = { headers: headers, tags: opts.tags || {}, responseType: opts.responseType || 'text' };
  if (opts.timeout) {
    params.timeout = opts.timeout;
  }
  if (opts.expectedStatuses) {
    // Statuses that are not failures for http_req_failed (e.g. 404 for an existence probe).
    params.responseCallback = http.expectedStatuses(...opts.expectedStatuses);
  }
  return { method: method, url: url, body: method === 'GET' || method === 'HEAD' ? null : body, params: params };
}

// Sign and send one request.
export function s3Request(cfg, method, path, opts) {
  const r = signedRequest(cfg, method, path, opts);
  return http.request(r.method, r.url, r.body, r.params);
}

// The configuration from k6's -e variables.
export function configFromEnv() {
  return {
    endpoint: (__ENV.S3_ENDPOINT || 'http://127.0.0.1:9000').replace(/\/$/, ''),
    accessKey: __ENV.S3_ACCESS_KEY || 'holtadmin',
    secretKey: __ENV.S3_SECRET_KEY || 'holtadmin-secret-key',
    region: __ENV.S3_REGION || 'us-east-1',
  };
}

// Minimal XML helpers for S3's flat response documents.
export function xmlUnescape(text) {
  return text
    .replace(/&lt;/g, '<')
    .replace(/&gt;/g, '>')
    .replace(/&quot;/g, '"')
    .replace(/&apos;/g, "'")
    .replace(/&#(\d+);/g, (_, n) => String.fromCodePoint(Number(n)))
    .replace(/&#x([0-9a-fA-F]+);/g, (_, n) => String.fromCodePoint(parseInt(n, 16)))
    .replace(/&amp;/g, '&');
}

export function xmlEscape(text) {
  return text
    .replace(/&/g, '&amp;')
    .replace(/</g, '&lt;')
    .replace(/>/g, '&gt;')
    .replace(/"/g, '&quot;')
    .replace(/'/g, '&apos;');
}

// Raw (still escaped) contents of every <tag>...</tag>; S3 documents never nest a tag in itself.
function xmlAllRaw(xml, tag) {
  const out = [];
  const re = new RegExp('<' + tag + '>([\\s\\S]*?)</' + tag + '>', 'g');
  let m;
  while ((m = re.exec(xml || '')) !== null) {
    out.push(m[1]);
  }
  return out;
}

// All text values of <tag>...</tag>, unescaped.
export function xmlAll(xml, tag) {
  return xmlAllRaw(xml, tag).map(xmlUnescape);
}

export function xmlFirst(xml, tag) {
  const all = xmlAll(xml, tag);
  return all.length > 0 ? all[0] : null;
}

// Common prefixes: <CommonPrefixes><Prefix>p</Prefix></CommonPrefixes>.
export function xmlCommonPrefixes(xml) {
  return xmlAllRaw(xml, 'CommonPrefixes').map((inner) => xmlFirst(inner, 'Prefix'));
}
