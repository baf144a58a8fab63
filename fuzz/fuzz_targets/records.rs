//! The stored-record decoders (object, listed object, bucket, upload, part and part summary).
//! Records come from the engine, checksummed; a corrupt one must still decode to `None` or a
//! value, never a panic or an allocation the record's size does not justify. A decoded record
//! encodes back to bytes that decode to the same encoding.
#![no_main]

use gateway::storage::meta::{BucketMeta, ObjectMeta, PartMeta, UploadMeta};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Some(meta) = ObjectMeta::decode(data) {
        let bytes = meta.encode();
        let again = ObjectMeta::decode(&bytes).expect("an encoded object record decodes");
        assert_eq!(again.encode(), bytes);
        assert!(ObjectMeta::decode_listed(&bytes).is_some());
    }
    let _ = ObjectMeta::decode_listed(data);
    if let Some(meta) = BucketMeta::decode(data) {
        let bytes = meta.encode();
        assert_eq!(BucketMeta::decode(&bytes).expect("an encoded bucket record decodes").encode(), bytes);
    }
    if let Some(meta) = UploadMeta::decode(data) {
        let bytes = meta.encode();
        assert_eq!(UploadMeta::decode(&bytes).expect("an encoded upload record decodes").encode(), bytes);
    }
    if let Some(meta) = PartMeta::decode(data) {
        let bytes = meta.encode();
        assert_eq!(PartMeta::decode(&bytes).expect("an encoded part record decodes").encode(), bytes);
    }
    let _ = PartMeta::decode_summary(data);
});
