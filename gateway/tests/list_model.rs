//! Model test: random keys over a tiny alphabet (so prefixes, delimiters and `+`/`.` ordering
//! collide often), random prefix / delimiter / page size, paged through ListObjectsV2 tokens and
//! v1 markers; the concatenated pages must equal a reference listing computed from a sorted
//! set: the whole listing, in byte order, every entry once. Prints its seed; set
//! LIST_MODEL_SEED to replay.

mod common;

use std::collections::BTreeSet;

use common::*;
use http::Method;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const ALPHABET: &[char] = &['a', 'b', '/', '+', '.', ' '];

fn random_string(rng: &mut StdRng, max_len: usize) -> String {
    let len = rng.gen_range(0..=max_len);
    (0..len).map(|_| ALPHABET[rng.gen_range(0..ALPHABET.len())]).collect()
}

/// The reference: every entry of the listing, in order.
fn reference(keys: &BTreeSet<String>, prefix: &str, delimiter: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for k in keys.iter().filter(|k| k.starts_with(prefix)) {
        let rest = &k[prefix.len()..];
        let entry = match (!delimiter.is_empty()).then(|| rest.find(delimiter)).flatten() {
            Some(i) => format!("{}{}", &k[..prefix.len() + i], delimiter),
            None => k.clone(),
        };
        if out.last() != Some(&entry) {
            out.push(entry);
        }
    }
    out
}

fn q(s: &str) -> String {
    encode_key(s).replace('/', "%2F")
}

#[tokio::test]
async fn paged_listings_match_the_reference() {
    let seed: u64 =
        std::env::var("LIST_MODEL_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(rand::random);
    println!("LIST_MODEL_SEED={seed}");
    let mut rng = StdRng::seed_from_u64(seed);
    let gw = Gw::new();
    gw.create_bucket("bkt").await;
    let mut keys = BTreeSet::new();
    while keys.len() < 60 {
        let k = random_string(&mut rng, 6);
        if !k.is_empty() && keys.insert(k.clone()) {
            gw.put("bkt", &k, b"").await;
        }
    }
    for round in 0..40 {
        let prefix = random_string(&mut rng, 2);
        let delimiter = ["", "/", "a", "+", "/.", "ab"][rng.gen_range(0..6)].to_owned();
        let max = rng.gen_range(1..=5);
        let expected = reference(&keys, &prefix, &delimiter);
        let ctx = format!("seed {seed} round {round}: prefix {prefix:?} delimiter {delimiter:?} max {max}");

        // ListObjectsV2 with tokens (url-encoded responses, decoded here).
        let mut got = Vec::new();
        let mut token: Option<String> = None;
        for _ in 0..100 {
            let mut target = format!(
                "/bkt?list-type=2&encoding-type=url&prefix={}&delimiter={}&max-keys={max}",
                q(&prefix),
                q(&delimiter)
            );
            if let Some(t) = &token {
                target.push_str(&format!("&continuation-token={t}"));
            }
            let r = gw.a(Method::GET, &target, b"").await;
            assert_eq!(r.status, 200, "{ctx}: {}", r.text());
            let mut page: Vec<String> = r.xml_all("Key");
            page.extend(r.xml_all("Prefix").into_iter().skip(1));
            let mut page: Vec<String> = page
                .iter()
                .map(|s| percent_encoding::percent_decode_str(s).decode_utf8().unwrap().into_owned())
                .collect();
            page.sort();
            assert!(page.len() <= max, "{ctx}");
            got.extend(page);
            match r.xml("NextContinuationToken") {
                Some(t) => token = Some(t),
                None => break,
            }
        }
        assert_eq!(got, expected, "{ctx} (v2)");

        // ListObjects v1 with markers (NextMarker with a delimiter, else the last key).
        let mut got = Vec::new();
        let mut marker = String::new();
        for _ in 0..100 {
            let target = format!(
                "/bkt?encoding-type=url&prefix={}&delimiter={}&max-keys={max}&marker={}",
                q(&prefix),
                q(&delimiter),
                q(&marker)
            );
            let r = gw.a(Method::GET, &target, b"").await;
            let decode =
                |s: &String| percent_encoding::percent_decode_str(s).decode_utf8().unwrap().into_owned();
            let mut page: Vec<String> = r.xml_all("Key").iter().map(decode).collect();
            page.extend(r.xml_all("Prefix").iter().skip(1).map(decode));
            page.sort();
            got.extend(page.iter().cloned());
            if r.xml("IsTruncated").as_deref() != Some("true") {
                break;
            }
            marker = match r.xml("NextMarker") {
                Some(m) => decode(&m),
                None => page.last().cloned().expect("truncated page has entries"),
            };
        }
        assert_eq!(got, expected, "{ctx} (v1)");
    }
}
