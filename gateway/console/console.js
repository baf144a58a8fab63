// The holt console: a page of plain JavaScript that talks S3 to the gateway that served it.
// Every request is signed here with SigV4 (WebCrypto's HMAC-SHA256 and SHA-256); the secret
// key lives in this page's memory only, never in storage (an object served from the same
// origin and opened in this tab could read that) and never leaves the browser: a reload
// asks for it again.
'use strict';

const REGION = document.querySelector('meta[name="holt-region"]').content || 'us-east-1';
const EMPTY_SHA256 = 'e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855';
const SINGLE_PUT_MAX = 64 * 1024 * 1024;
const PART_BYTES = 16 * 1024 * 1024;
const enc = new TextEncoder();
const $ = (id) => document.getElementById(id);

// ---- SigV4 -------------------------------------------------------------------------------

function hex(bytes) {
  return Array.from(new Uint8Array(bytes), (b) => b.toString(16).padStart(2, '0')).join('');
}

async function sha256Hex(data) {
  const bytes = typeof data === 'string' ? enc.encode(data) : data;
  return hex(await crypto.subtle.digest('SHA-256', bytes));
}

async function hmac(key, text) {
  const k = await crypto.subtle.importKey('raw', key, { name: 'HMAC', hash: 'SHA-256' }, false, ['sign']);
  return new Uint8Array(await crypto.subtle.sign('HMAC', k, enc.encode(text)));
}

// RFC 3986 encoding as SigV4 wants it: everything but A-Z a-z 0-9 - _ . ~ (and `/` in paths).
function uriEncode(text, keepSlash) {
  const encoded = encodeURIComponent(text).replace(/[!'()*]/g, (c) => '%' + c.charCodeAt(0).toString(16).toUpperCase());
  return keepSlash ? encoded.replace(/%2F/g, '/') : encoded;
}

function objectPath(bucket, key) {
  return '/' + uriEncode(bucket, false) + (key === undefined ? '' : '/' + uriEncode(key, true));
}

function canonicalQuery(params) {
  return Object.keys(params)
    .map((k) => [uriEncode(k, false), uriEncode(String(params[k]), false)])
    .sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : a[1] < b[1] ? -1 : 1))
    .map(([k, v]) => k + '=' + v)
    .join('&');
}

function amzDate(now) {
  return now.toISOString().replace(/[-:]/g, '').replace(/\.\d{3}/, '');
}

async function signature(secret, stamp, canonical) {
  const day = stamp.slice(0, 8);
  const scope = `${day}/${REGION}/s3/aws4_request`;
  const toSign = ['AWS4-HMAC-SHA256', stamp, scope, await sha256Hex(canonical)].join('\n');
  let key = await hmac(enc.encode('AWS4' + secret), day);
  for (const part of [REGION, 's3', 'aws4_request']) key = await hmac(key, part);
  return { scope, signature: hex(await hmac(key, toSign)) };
}

// Headers that sign `method path?query` with `payloadHash` (the body's SHA-256 hex, or
// UNSIGNED-PAYLOAD).
async function signedHeaders(method, path, params, payloadHash) {
  const { accessKey, secretKey } = credentials();
  const stamp = amzDate(new Date());
  const names = 'host;x-amz-content-sha256;x-amz-date';
  const canonical = [
    method, path, canonicalQuery(params),
    `host:${location.host}\nx-amz-content-sha256:${payloadHash}\nx-amz-date:${stamp}\n`,
    names, payloadHash,
  ].join('\n');
  const { scope, signature: sig } = await signature(secretKey, stamp, canonical);
  return {
    'x-amz-date': stamp,
    'x-amz-content-sha256': payloadHash,
    Authorization: `AWS4-HMAC-SHA256 Credential=${accessKey}/${scope}, SignedHeaders=${names}, Signature=${sig}`,
  };
}

// A presigned URL: anyone holding it may `method` the object for `seconds`.
async function presign(method, path, seconds) {
  const { accessKey, secretKey } = credentials();
  const stamp = amzDate(new Date());
  const params = {
    'X-Amz-Algorithm': 'AWS4-HMAC-SHA256',
    'X-Amz-Credential': `${accessKey}/${stamp.slice(0, 8)}/${REGION}/s3/aws4_request`,
    'X-Amz-Date': stamp,
    'X-Amz-Expires': String(seconds),
    'X-Amz-SignedHeaders': 'host',
  };
  const query = canonicalQuery(params);
  const canonical = [method, path, query, `host:${location.host}\n`, 'host', 'UNSIGNED-PAYLOAD'].join('\n');
  const { signature: sig } = await signature(secretKey, stamp, canonical);
  return `${location.origin}${path}?${query}&X-Amz-Signature=${sig}`;
}

// ---- S3 calls ------------------------------------------------------------------------------

class S3Failure extends Error {}

function errorOf(status, text) {
  const doc = text ? new DOMParser().parseFromString(text, 'application/xml') : null;
  const code = doc?.querySelector('Error > Code')?.textContent;
  const message = doc?.querySelector('Error > Message')?.textContent;
  return new S3Failure(code ? `${code}: ${message || ''}` : `HTTP ${status}`);
}

async function s3(method, path, params = {}, body = null) {
  const payloadHash = body === null ? EMPTY_SHA256 : await sha256Hex(body);
  const headers = await signedHeaders(method, path, params, payloadHash);
  const query = canonicalQuery(params);
  const resp = await fetch(path + (query ? '?' + query : ''), { method, headers, body, cache: 'no-store' });
  const text = method === 'HEAD' ? '' : await resp.text();
  if (!resp.ok) throw errorOf(resp.status, text);
  return { resp, text, xml: text ? new DOMParser().parseFromString(text, 'application/xml') : null };
}

// An upload through XMLHttpRequest (fetch reports no upload progress); the body unsigned.
function xhrPut(path, params, body, onProgress) {
  return new Promise(async (resolve, reject) => {
    const headers = await signedHeaders('PUT', path, params, 'UNSIGNED-PAYLOAD');
    const query = canonicalQuery(params);
    const xhr = new XMLHttpRequest();
    xhr.open('PUT', path + (query ? '?' + query : ''));
    for (const [k, v] of Object.entries(headers)) xhr.setRequestHeader(k, v);
    xhr.upload.onprogress = (e) => onProgress(e.loaded);
    xhr.onload = () => (xhr.status === 200 ? resolve(xhr.getResponseHeader('ETag')) : reject(errorOf(xhr.status, xhr.responseText)));
    xhr.onerror = () => reject(new S3Failure('the upload failed on the network'));
    xhr.send(body);
  });
}

async function upload(bucket, key, file, onProgress) {
  const path = objectPath(bucket, key);
  if (file.size <= SINGLE_PUT_MAX) {
    await xhrPut(path, {}, file, onProgress);
    return;
  }
  const created = await s3('POST', path, { uploads: '' });
  const uploadId = created.xml.querySelector('UploadId').textContent;
  try {
    const parts = [];
    for (let offset = 0, n = 1; offset < file.size; offset += PART_BYTES, n++) {
      const etag = await xhrPut(path, { partNumber: n, uploadId }, file.slice(offset, offset + PART_BYTES),
        (loaded) => onProgress(offset + loaded));
      parts.push(`<Part><PartNumber>${n}</PartNumber><ETag>${etag}</ETag></Part>`);
    }
    await s3('POST', path, { uploadId }, `<CompleteMultipartUpload>${parts.join('')}</CompleteMultipartUpload>`);
  } catch (e) {
    await s3('DELETE', path, { uploadId }).catch(() => {});
    throw e;
  }
}

// ---- state and rendering -------------------------------------------------------------------

// `after`: the last name of the page shown last (the usage of the next page starts there).
let current = { bucket: null, prefix: '', token: null, after: '' };
let signer = { accessKey: null, secretKey: null };

function credentials() {
  return signer;
}

function status(text) {
  $('status').textContent = text || '';
}

function formatSize(bytes) {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB', 'PiB'];
  let n = Number(bytes);
  let u = 0;
  while (n >= 1024 && u < units.length - 1) { n /= 1024; u++; }
  return (u === 0 ? String(n) : n.toFixed(1)) + ' ' + units[u];
}

function textOf(node, selector) {
  return node.querySelector(selector)?.textContent ?? '';
}

// Keys come back url-encoded when the listing says so (characters XML cannot carry).
function decoded(doc, text) {
  return textOf(doc, 'EncodingType') === 'url' ? decodeURIComponent(text.replace(/\+/g, ' ')) : text;
}

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === 'onclick') node.addEventListener('click', (e) => { e.preventDefault(); v(); });
    else node.setAttribute(k, v);
  }
  node.append(...children);
  return node;
}

async function showBuckets() {
  const { xml } = await s3('GET', '/');
  const list = $('bucket-list');
  list.replaceChildren(...[...xml.querySelectorAll('Buckets > Bucket')].map((b) => {
    const name = textOf(b, 'Name');
    const cls = name === current.bucket ? 'current' : '';
    return el('li', {}, el('a', { href: '#', class: cls, 'data-bucket': name, onclick: () => openPrefix(name, '') }, name));
  }));
}

async function openPrefix(bucket, prefix) {
  current = { bucket, prefix, token: null, after: '' };
  $('details').hidden = true;
  $('chart').replaceChildren();
  $('usage').textContent = '';
  $('listing').querySelector('tbody').replaceChildren();
  renderPath();
  await showBuckets();
  await listPage();
}

function renderPath() {
  const crumbs = [el('a', { href: '#', onclick: () => openPrefix(current.bucket, '') }, current.bucket)];
  let at = '';
  for (const part of current.prefix.split('/').filter(Boolean)) {
    at += part + '/';
    const to = at;
    crumbs.push(' / ', el('a', { href: '#', onclick: () => openPrefix(current.bucket, to) }, part));
  }
  $('path').replaceChildren(...crumbs);
}

// The objects and bytes under the prefix being browsed and under each of the directories
// of the page that starts after `after` (the gateway's usage extension, `GET /bucket?usage`).
async function usagePage(after) {
  const params = { usage: '', delimiter: '/', 'max-keys': '1000', prefix: current.prefix, 'encoding-type': 'url' };
  if (after) params['start-after'] = after;
  const { xml } = await s3('GET', objectPath(current.bucket), params);
  const perPrefix = new Map();
  for (const cp of xml.querySelectorAll('CommonPrefixes')) {
    perPrefix.set(decoded(xml, textOf(cp, 'Prefix')),
      { objects: Number(textOf(cp, 'Objects')), bytes: Number(textOf(cp, 'Bytes')) });
  }
  const root = xml.documentElement;
  const uploads = root.querySelector(':scope > UploadsInProgress');
  return {
    objects: Number(textOf(root, ':scope > Objects')),
    bytes: Number(textOf(root, ':scope > Bytes')),
    uploads: uploads ? Number(textOf(uploads, 'Uploads')) : 0,
    uploadBytes: uploads ? Number(textOf(uploads, 'Bytes')) : 0,
    perPrefix,
  };
}

// Bars of the largest directories and objects of the page, by bytes. Widths are set through
// the CSSOM: the console's Content-Security-Policy refuses style attributes.
function drawChart(items, total) {
  const top = items.filter((i) => i.bytes > 0).sort((a, b) => b.bytes - a.bytes).slice(0, 12);
  $('chart').replaceChildren(...top.map((i) => {
    const fill = el('div', { class: 'fill' });
    fill.style.width = `${total > 0 ? (100 * i.bytes / total).toFixed(2) : 0}%`;
    return el('div', { class: 'bar', 'data-name': i.name, 'data-bytes': String(i.bytes) },
      el('span', { title: i.name }, i.name.slice(current.prefix.length) || i.name),
      el('div', { class: 'track' }, fill),
      el('span', { class: 'num' }, formatSize(i.bytes)));
  }));
}

async function listPage() {
  const params = { 'list-type': '2', delimiter: '/', 'max-keys': '1000', prefix: current.prefix };
  if (current.token) params['continuation-token'] = current.token;
  // The figures are extra: a gateway that cannot give them yet (a bucket still importing
  // from an upstream store answers 503) still gets its listing shown.
  const [{ xml }, usage] = await Promise.all([
    s3('GET', objectPath(current.bucket), params),
    usagePage(current.after).catch((e) => ({ failed: e.message, perPrefix: new Map() })),
  ]);
  if (usage.failed) {
    $('usage').textContent = `sizes unavailable: ${usage.failed}`;
  } else {
    const usageText = `${usage.objects.toLocaleString()} objects, ${formatSize(usage.bytes)} under ${current.prefix || 'the bucket'}`;
    $('usage').textContent = usage.uploads
      ? `${usageText}; ${usage.uploads} upload(s) in progress holding ${formatSize(usage.uploadBytes)}` : usageText;
    $('usage').dataset.objects = String(usage.objects);
    $('usage').dataset.bytes = String(usage.bytes);
  }
  const rows = [];
  const bars = [];
  for (const p of xml.querySelectorAll('CommonPrefixes > Prefix')) {
    const prefix = decoded(xml, p.textContent);
    const name = prefix.slice(current.prefix.length);
    const u = usage.perPrefix.get(prefix);
    if (u) bars.push({ name: prefix, bytes: u.bytes });
    rows.push(el('tr', { class: 'prefix', 'data-prefix': prefix, 'data-objects': u ? String(u.objects) : '',
      'data-bytes': u ? String(u.bytes) : '' },
      el('td', {}, el('a', { href: '#', onclick: () => openPrefix(current.bucket, prefix) }, name)),
      el('td', { class: 'num' }, u ? u.objects.toLocaleString() : '—'),
      el('td', { class: 'num' }, u ? formatSize(u.bytes) : '—'), el('td'), el('td')));
  }
  for (const c of xml.querySelectorAll('Contents')) {
    const key = decoded(xml, textOf(c, 'Key'));
    const size = textOf(c, 'Size');
    bars.push({ name: key, bytes: Number(size) });
    rows.push(el('tr', { class: 'object', 'data-key': key, 'data-size': size },
      el('td', {}, el('a', { href: '#', onclick: () => details(key) }, key.slice(current.prefix.length))),
      el('td', { class: 'num' }, '1'),
      el('td', { class: 'num' }, formatSize(size)),
      el('td', {}, new Date(textOf(c, 'LastModified')).toLocaleString()),
      el('td', {}, el('a', { href: '#', onclick: () => remove(key) }, 'delete'))));
  }
  $('listing').querySelector('tbody').append(...rows);
  if (!current.after && !usage.failed) drawChart(bars, usage.bytes);
  const names = [...xml.querySelectorAll('CommonPrefixes > Prefix'), ...xml.querySelectorAll('Contents > Key')]
    .map((n) => decoded(xml, n.textContent)).sort();
  current.after = names.length ? names[names.length - 1] : current.after;
  current.token = textOf(xml, 'IsTruncated') === 'true' ? textOf(xml, 'NextContinuationToken') : null;
  $('more').hidden = !current.token;
}

async function details(key) {
  const path = objectPath(current.bucket, key);
  const { resp } = await s3('HEAD', path);
  const entries = [['Key', key]];
  for (const [name, value] of resp.headers) {
    if (['content-length', 'content-type', 'etag', 'last-modified', 'cache-control', 'content-encoding',
      'x-amz-storage-class', 'x-amz-tagging-count'].includes(name) || name.startsWith('x-amz-meta-')
      || name.startsWith('x-amz-checksum-')) {
      entries.push([name, value]);
    }
  }
  if (resp.headers.get('x-amz-tagging-count')) {
    const { xml } = await s3('GET', path, { tagging: '' });
    for (const tag of xml.querySelectorAll('Tag')) entries.push(['tag ' + textOf(tag, 'Key'), textOf(tag, 'Value')]);
  }
  $('details-key').textContent = key;
  $('details-list').replaceChildren(...entries.flatMap(([k, v]) => [el('dt', {}, k), el('dd', {}, v)]));
  const link = $('download');
  link.href = await presign('GET', path, 3600);
  link.setAttribute('download', key.split('/').pop());
  $('delete-object').onclick = () => remove(key).catch((e) => status(e.message));
  $('details').hidden = false;
}

async function remove(key) {
  if (!confirm(`Delete ${key}?`)) return;
  await s3('DELETE', objectPath(current.bucket, key));
  await openPrefix(current.bucket, current.prefix);
}

async function uploadFiles(files) {
  const total = [...files].reduce((n, f) => n + f.size, 0) || 1;
  let done = 0;
  $('progress').hidden = false;
  for (const file of files) {
    const key = current.prefix + file.name;
    $('progress-text').textContent = `uploading ${key}`;
    await upload(current.bucket, key, file, (loaded) => { $('progress-bar').value = (done + loaded) / total; });
    done += file.size;
  }
  $('progress-bar').value = 1;
  $('progress-text').textContent = `uploaded ${files.length} file(s)`;
  await openPrefix(current.bucket, current.prefix);
}

// ---- wiring --------------------------------------------------------------------------------

function guard(f) {
  return (...args) => {
    status('');
    Promise.resolve(f(...args)).catch((e) => status(e.message));
  };
}

async function signedIn() {
  $('sign-in').hidden = true;
  $('app').hidden = false;
  $('sign-out').hidden = false;
  $('who').textContent = credentials().accessKey;
  await showBuckets();
  const first = document.querySelector('#bucket-list a');
  if (first) await openPrefix(first.dataset.bucket, '');
}

$('sign-in-form').addEventListener('submit', guard(async (e) => {
  e.preventDefault();
  signer = { accessKey: $('access-key').value.trim(), secretKey: $('secret-key').value };
  $('secret-key').value = '';
  try {
    await s3('GET', '/', { 'max-buckets': '1' });
  } catch (err) {
    signer = { accessKey: null, secretKey: null };
    $('sign-in-error').textContent = err.message;
    return;
  }
  $('sign-in-error').textContent = '';
  await signedIn();
}));
$('sign-out').addEventListener('click', () => location.reload());
$('create-bucket-form').addEventListener('submit', guard(async (e) => {
  e.preventDefault();
  const name = $('new-bucket').value.trim();
  await s3('PUT', objectPath(name));
  $('new-bucket').value = '';
  await openPrefix(name, '');
}));
$('delete-bucket').addEventListener('click', guard(async () => {
  if (!current.bucket || !confirm(`Delete bucket ${current.bucket}?`)) return;
  await s3('DELETE', objectPath(current.bucket));
  current.bucket = null;
  $('listing').querySelector('tbody').replaceChildren();
  $('path').replaceChildren();
  await showBuckets();
}));
$('upload-input').addEventListener('change', guard(async (e) => {
  const files = [...e.target.files];
  e.target.value = '';
  if (current.bucket && files.length) await uploadFiles(files);
}));
$('more').addEventListener('click', guard(listPage));
if (!window.crypto?.subtle) {
  $('sign-in-error').textContent = 'This page needs a secure context (HTTPS, or localhost) to sign requests.';
}
