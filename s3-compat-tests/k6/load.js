// Load scenarios against a running gateway, signed by lib/sigv4.js. Run through scripts/load.sh.
//
// SCENARIO (env):
//   head   HeadObject on one of 100 seeded 1 KiB objects
//   list   ListObjectsV2 prefix=list/ delimiter=/ max-keys=1000: a full 1000-entry page of
//          common prefixes, each standing for a subtree (the metadata fast path)
//   get    GetObject of a seeded 1 KiB object, bytes checked
//   put    PutObject of a fresh 1 KiB object
//   mixed  50% head, 20% get, 20% put, 10% list
//
// Bounded in time and count: shared-iterations with MAX_ITERATIONS and DURATION as maxDuration.
// Env: S3_ENDPOINT, S3_ACCESS_KEY, S3_SECRET_KEY, S3_REGION, BUCKET, VUS, DURATION,
//      MAX_ITERATIONS, SEED_PREFIXES (default 1100), RATE (a fixed request rate, see below).
import { check } from 'k6';
import http from 'k6/http';
import { Counter } from 'k6/metrics';
import { configFromEnv, md5Hex, objectPath, s3Request, signedRequest, xmlCommonPrefixes } from './lib/sigv4.js';

const cfg = configFromEnv();
const BUCKET = __ENV.BUCKET || 'holt-load';
const SCENARIO = __ENV.SCENARIO || 'mixed';
const VUS = Number(__ENV.VUS || 16);
const DURATION = __ENV.DURATION || '30s';
const MAX_ITERATIONS = Number(__ENV.MAX_ITERATIONS || 1000000);
const SEED_PREFIXES = Number(__ENV.SEED_PREFIXES || 1100);
const GET_OBJECTS = 100;
const BODY = 'x'.repeat(1024);
const BODY_MD5 = md5Hex(BODY);

// RATE (requests a second), when set, offers a fixed load from VUS connections instead of as
// many requests as VUS can send: latency at a given load, not the most the machine can do.
const RATE = Number(__ENV.RATE || 0);

const operations = new Counter('s3_operations');

const executor = RATE > 0
  ? { executor: 'constant-arrival-rate', rate: RATE, timeUnit: '1s', duration: DURATION, preAllocatedVUs: VUS, maxVUs: VUS }
  : { executor: 'shared-iterations', vus: VUS, iterations: MAX_ITERATIONS, maxDuration: DURATION };

export const options = {
  setupTimeout: '300s',
  scenarios: { [SCENARIO]: executor },
  thresholds: {
    // Any error response or failed check fails the run.
    http_req_failed: ['rate<0.001'],
    checks: ['rate>0.999'],
    // Always true: they make the summary carry each operation's latency on its own.
    'http_req_duration{op:HeadObject}': ['max>=0'],
    'http_req_duration{op:GetObject}': ['max>=0'],
    'http_req_duration{op:PutObject}': ['max>=0'],
    'http_req_duration{op:ListObjectsV2}': ['max>=0'],
  },
  summaryTrendStats: ['avg', 'p(50)', 'p(90)', 'p(99)', 'max'],
};

function getKey(i) {
  return 'get/obj-' + String(i).padStart(4, '0');
}

// Seed once: the bucket, 100 objects to read, and SEED_PREFIXES subtrees under list/ so a
// delimiter listing of list/ fills a 1000-entry page with common prefixes.
export function setup() {
  const created = s3Request(cfg, 'PUT', objectPath(BUCKET), { expectedStatuses: [200, 409] });
  if (created.status !== 200 && created.status !== 409) {
    throw new Error('CreateBucket ' + BUCKET + ': HTTP ' + created.status + ' ' + created.body);
  }
  // A sentinel written last marks a complete seed, so repeated runs skip straight to the load.
  const sentinel = objectPath(BUCKET, 'seeded/prefixes-' + SEED_PREFIXES);
  if (s3Request(cfg, 'HEAD', sentinel, { expectedStatuses: [200, 404] }).status === 200) {
    return {};
  }
  const keys = [];
  for (let i = 0; i < GET_OBJECTS; i++) keys.push(getKey(i));
  for (let i = 0; i < SEED_PREFIXES; i++) {
    const dir = 'list/dir-' + String(i).padStart(5, '0') + '/';
    keys.push(dir + 'a', dir + 'b');
  }
  for (let i = 0; i < keys.length; i += 64) {
    const batch = keys.slice(i, i + 64).map((k) => signedRequest(cfg, 'PUT', objectPath(BUCKET, k), { body: BODY }));
    const failed = http.batch(batch).filter((r) => r.status !== 200);
    if (failed.length > 0) {
      throw new Error('seeding failed: HTTP ' + failed[0].status + ' ' + failed[0].body);
    }
  }
  const marked = s3Request(cfg, 'PUT', sentinel, { body: 'ok' });
  if (marked.status !== 200) {
    throw new Error('writing the seed sentinel failed: HTTP ' + marked.status);
  }
  return {};
}

function doHead() {
  const res = s3Request(cfg, 'HEAD', objectPath(BUCKET, getKey(Math.floor(Math.random() * GET_OBJECTS))), {
    tags: { op: 'HeadObject' },
  });
  check(res, { 'HeadObject 200': (r) => r.status === 200 && r.headers['Content-Length'] === '1024' });
}

function doGet() {
  const res = s3Request(cfg, 'GET', objectPath(BUCKET, getKey(Math.floor(Math.random() * GET_OBJECTS))), {
    tags: { op: 'GetObject' },
  });
  check(res, { 'GetObject 200 with the bytes': (r) => r.status === 200 && md5Hex(r.body) === BODY_MD5 });
}

function doPut() {
  const key = 'put/vu-' + __VU + '/iter-' + __ITER;
  const res = s3Request(cfg, 'PUT', objectPath(BUCKET, key), { body: BODY, tags: { op: 'PutObject' } });
  check(res, { 'PutObject 200': (r) => r.status === 200 });
}

function doList() {
  const res = s3Request(cfg, 'GET', objectPath(BUCKET), {
    query: { 'list-type': '2', prefix: 'list/', delimiter: '/', 'max-keys': '1000' },
    tags: { op: 'ListObjectsV2' },
  });
  check(res, {
    'ListObjectsV2 1000 common prefixes': (r) => r.status === 200 && xmlCommonPrefixes(r.body).length === Math.min(1000, SEED_PREFIXES),
  });
}

export default function () {
  operations.add(1);
  switch (SCENARIO) {
    case 'head':
      return doHead();
    case 'get':
      return doGet();
    case 'put':
      return doPut();
    case 'list':
      return doList();
    default: {
      const roll = Math.random();
      if (roll < 0.5) return doHead();
      if (roll < 0.7) return doGet();
      if (roll < 0.9) return doPut();
      return doList();
    }
  }
}
