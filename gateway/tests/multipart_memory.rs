//! A CompleteMultipartUpload or AbortMultipartUpload of an upload with 10,000 small parts
//! (bodies inline in the part records) reads the part records without their bodies: a
//! Complete refused for a wrong ETag allocates a few MB, not the ~40 MB of the parts' bodies
//! (64 such requests at once took a gateway from 93 MiB to 2.7 GiB), and a Complete that
//! succeeds still copies each inline body it names.

mod common;

use common::*;
use gateway::storage::meta::{BodyRef, PartMeta};
use gateway::storage::schema;
use holt_core::{Batch, BatchOp, Condition};
use http::Method;
use md5::{Digest as _, Md5};
use stats_alloc::{StatsAlloc, INSTRUMENTED_SYSTEM};

#[global_allocator]
static ALLOCATOR: &StatsAlloc<std::alloc::System> = &INSTRUMENTED_SYSTEM;

const PARTS: u32 = 10_000;
const PART_BYTES: usize = 4096;

fn live() -> isize {
    let s = ALLOCATOR.stats();
    s.bytes_allocated as isize - s.bytes_deallocated as isize
}

/// The most the heap grew above its size at the start while `request` ran, sampled by a
/// thread every 20 µs.
async fn peak_growth<T>(request: impl std::future::Future<Output = T>) -> (T, isize) {
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let base = live();
    let sampler = {
        let stop = std::sync::Arc::clone(&stop);
        std::thread::spawn(move || {
            let mut peak = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                peak = peak.max(live() - base);
                std::thread::sleep(std::time::Duration::from_micros(20));
            }
            peak.max(live() - base)
        })
    };
    let out = request.await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    (out, sampler.join().expect("sampler"))
}

fn part_body(n: u32) -> Vec<u8> {
    format!("{n:08}").into_bytes().into_iter().cycle().take(PART_BYTES).collect()
}

/// Creates an upload of `key` with `PARTS` inline parts written straight into the engine
/// (as UploadPart would store them); returns its id.
async fn upload_with_small_parts(gw: &Gw, key: &str) -> String {
    let r = gw.a(Method::POST, &format!("/bkt/{key}?uploads"), b"").await;
    assert_eq!(r.status, 200, "{}", r.text());
    let id = r.xml("UploadId").expect("upload id");
    let mut ops = Vec::new();
    for n in 1..=PARTS {
        let body = part_body(n);
        let meta = PartMeta {
            size: body.len() as u64,
            md5: Md5::digest(&body).into(),
            last_modified_ms: 1_700_000_000_000,
            checksums: Vec::new(),
            body: BodyRef::Inline(body),
        };
        ops.push(BatchOp::Put {
            key: schema::part(&id, n),
            value: meta.encode(),
            condition: Condition::None,
        });
        if ops.len() == 500 {
            gw.state.store().write_batch(Batch { ops: std::mem::take(&mut ops) }).await.expect("parts");
        }
    }
    gw.state.store().write_batch(Batch { ops }).await.expect("parts");
    id
}

fn etag(n: u32) -> String {
    format!("\"{}\"", hex::encode(Md5::digest(part_body(n))))
}

#[tokio::test]
async fn completing_or_aborting_ten_thousand_inline_parts_does_not_copy_their_bodies() {
    let gw = Gw::new();
    gw.create_bucket("bkt").await;
    let id = upload_with_small_parts(&gw, "big").await;

    // Refused for a wrong ETag after reading the parts: what it allocated is bounded.
    let wrong = complete_body(&[(1, "\"00000000000000000000000000000000\"")]);
    let (r, grew) = peak_growth(gw.a(Method::POST, &format!("/bkt/big?uploadId={id}"), &wrong)).await;
    r.assert_error(400, "InvalidPart");
    println!("a refused Complete over {PARTS} inline parts: the heap grew at most {grew} B");
    let parts_bytes = (PARTS as usize * PART_BYTES) as isize;
    assert!(
        grew < parts_bytes / 8,
        "a refused Complete grew the heap {grew} B ({parts_bytes} B of part bodies)"
    );

    // A Complete naming one part (the last may be small) copies that part's inline body.
    let r = gw.a(Method::POST, &format!("/bkt/big?uploadId={id}"), &complete_body(&[(7, &etag(7))])).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let got = gw.a(Method::GET, "/bkt/big", b"").await;
    assert_eq!(got.status, 200);
    assert_eq!(got.body, part_body(7), "the completed object is part 7's body");

    // An Abort of another such upload is bounded the same way.
    let id = upload_with_small_parts(&gw, "other").await;
    let (r, grew) = peak_growth(gw.a(Method::DELETE, &format!("/bkt/other?uploadId={id}"), b"")).await;
    assert_eq!(r.status, 204, "{}", r.text());
    println!("an Abort over {PARTS} inline parts: the heap grew at most {grew} B");
    assert!(grew < parts_bytes / 4, "an Abort grew the heap {grew} B ({parts_bytes} B of part bodies)");
    let r = gw.a(Method::GET, &format!("/bkt/other?uploadId={id}"), b"").await;
    r.assert_error(404, "NoSuchUpload");
}
