//! Invariant: a frame image that is valid on its own but is not the one the manifest names
//! (an older image of the same frame, left in its slot by a lost or misdirected write) is
//! refused as corruption, never read as the frame's state.
//!
//! Set-up on real files: a checkpoint writes frame 0 holding one key; more keys split it, and
//! the next checkpoint writes frame 0 whole to another slot. The first image is then copied
//! over the slot the manifest names, as a write that never reached the disk would leave it
//! (had the slot held that image before). Its own checksums are all valid.

use std::path::Path;

use holt_core::{Batch, Db, Durability, Error, Options};

const FRAME_SIZE: usize = 512 << 10;

fn options() -> Options {
    Options { durability: Durability::Async, ..Options::default() }
}

/// Frame 0's image slot in the manifest (version 6: 72-byte header, 24-byte entries of frame
/// id, slot, checksum, known).
fn frame_0_slot(dir: &Path) -> u64 {
    let m = std::fs::read(dir.join("MANIFEST")).expect("manifest");
    let word = |at: usize| u64::from_le_bytes(m[at..at + 8].try_into().expect("8 bytes"));
    assert_eq!(word(8) & 0xFFFF_FFFF, 6, "manifest version");
    let count = word(56) as usize;
    (0..count).map(|i| 72 + 24 * i).find(|&e| word(e) == 0).map(|e| word(e + 8)).expect("frame 0 is listed")
}

fn key(i: u32) -> Vec<u8> {
    format!("dir-{:03}/object-{i:06}", i % 97).into_bytes()
}

#[test]
fn an_older_image_in_the_named_slot_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = Db::open(dir.path(), options()).expect("open");
    db.put(b"first", b"one").expect("put");
    db.checkpoint().expect("first checkpoint");
    let first_slot = frame_0_slot(dir.path()) as usize;
    let frames = std::fs::read(dir.path().join("frames.dat")).expect("frames file");
    let first_image = frames[first_slot * FRAME_SIZE..(first_slot + 1) * FRAME_SIZE].to_vec();

    // 3 MiB of values: frame 0 splits, and the checkpoint writes it whole to a fresh slot.
    for chunk in (0..3000u32).collect::<Vec<_>>().chunks(100) {
        let mut batch = Batch::new();
        for &i in chunk {
            batch.put(key(i), vec![b'v'; 1024]);
        }
        db.write_batch(&batch, Default::default()).expect("write");
    }
    db.close().expect("close");
    let slot = frame_0_slot(dir.path()) as usize;
    assert_ne!(slot, first_slot, "frame 0 was written to a fresh slot");

    // The write of frame 0's new image is lost: its slot holds the first image.
    let mut frames = std::fs::read(dir.path().join("frames.dat")).expect("frames file");
    frames[slot * FRAME_SIZE..(slot + 1) * FRAME_SIZE].copy_from_slice(&first_image);
    std::fs::write(dir.path().join("frames.dat"), &frames).expect("rewrite frames file");

    // Open reads the root frame (frame 0): it refuses there, or at the first read.
    let refused = |e: Error| match e {
        Error::Corruption { reason, .. } => {
            assert!(reason.contains("not the image the manifest names"), "{reason}")
        }
        other => panic!("expected corruption, got {other}"),
    };
    match Db::open(dir.path(), options()) {
        Err(e) => refused(e),
        Ok(db) => {
            for probe in [key(5), b"first".to_vec()] {
                match db.get(&probe) {
                    Err(e) => refused(e),
                    Ok(got) => panic!("the older image of frame 0 was read as its state: {got:?}"),
                }
            }
        }
    }
}
