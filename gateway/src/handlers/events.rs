//! Upstream mode: S3 event notifications from the upstream, so that writes which bypass the
//! gateway (straight to the upstream, or through another gateway) reach its index.
//!
//! `POST /_holt/events` takes the standard `Records` document: a MinIO webhook target, a
//! Ceph RGW HTTP push endpoint, or AWS S3 through an SNS HTTP(S) subscription (its
//! notification envelope, and its subscription confirmation). The sender authenticates with
//! `Authorization: Bearer <--upstream-events-token>` (SNS cannot: it is checked by the token
//! in the endpoint's query string instead, `?token=`).
//!
//! Every record is applied the same way, whatever its event name: the key is repaired from
//! the upstream (`through::repair_key`, a HEAD). That makes delivery order, duplicates and
//! retries harmless: a repair always converges on what the upstream holds now, so no
//! sequencer is needed. The endpoint answers 200 once every key is repaired, and 503 when the
//! upstream could not be asked (the sender retries).

use std::collections::BTreeSet;

use axum::body::Body;
use axum::response::{IntoResponse, Response};
use http::StatusCode;
use percent_encoding::percent_decode_str;

use crate::storage::{schema, Store};
use crate::upstream::Upstream;

/// The path events are posted to (bucket names cannot start with `_`).
pub const EVENTS_PATH: &str = "/_holt/events";
/// The largest notification document accepted.
const EVENTS_BODY_MAX: usize = 1 << 20;
/// The most keys one notification may name.
const EVENT_KEYS_MAX: usize = 10_000;

/// The (upstream bucket, object key) pairs a notification document names; an SNS envelope is
/// opened. `Err` for a document that is not one.
pub fn keys_of(doc: &serde_json::Value) -> Result<Vec<(String, String)>, &'static str> {
    if doc.get("Type").and_then(|t| t.as_str()) == Some("Notification") {
        let message =
            doc.get("Message").and_then(|m| m.as_str()).ok_or("an SNS notification without a Message")?;
        let inner: serde_json::Value =
            serde_json::from_str(message).map_err(|_| "an SNS Message that is not JSON")?;
        return keys_of(&inner);
    }
    // S3's test event when a configuration is saved: nothing to apply.
    if doc.get("Event").and_then(|e| e.as_str()) == Some("s3:TestEvent") {
        return Ok(Vec::new());
    }
    let records = doc.get("Records").and_then(|r| r.as_array()).ok_or("no Records")?;
    let mut out = Vec::with_capacity(records.len());
    for r in records {
        let s3 = r.get("s3").ok_or("a record without s3")?;
        let bucket =
            s3.pointer("/bucket/name").and_then(|b| b.as_str()).ok_or("a record without a bucket")?;
        let key = s3.pointer("/object/key").and_then(|k| k.as_str()).ok_or("a record without a key")?;
        // Keys are URL-encoded in notifications, with '+' for a space.
        let spaced = key.replace('+', " ");
        let key = percent_decode_str(&spaced).decode_utf8().map_err(|_| "a key that is not UTF-8")?;
        out.push((bucket.to_owned(), key.into_owned()));
    }
    Ok(out)
}

/// The local buckets an upstream bucket backs: those mapped to it, and the bucket of the same
/// name unless that name is mapped elsewhere.
fn local_buckets(up: &Upstream, upstream_bucket: &str) -> Vec<String> {
    let map = &up.config().buckets;
    let mut out: Vec<String> = map
        .iter()
        .filter(|(_, remote)| remote.as_str() == upstream_bucket)
        .map(|(local, _)| local.clone())
        .collect();
    if !map.contains_key(upstream_bucket) {
        out.push(upstream_bucket.to_owned());
    }
    out
}

fn answer(status: StatusCode, text: &str) -> Response {
    (status, format!("{text}\n")).into_response()
}

/// Handles one POST to `EVENTS_PATH`.
pub async fn handle(
    store: &Store,
    token: Option<&str>,
    parts: &http::request::Parts,
    body: Body,
) -> Response {
    use subtle::ConstantTimeEq;
    let (Some(up), Some(expected)) = (store.upstream.clone(), token) else {
        return answer(StatusCode::NOT_FOUND, "event notifications are off (no --upstream-events-token)");
    };
    let bearer = parts
        .headers
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, t)| t.trim().to_owned());
    let in_query = parts.uri.query().and_then(|q| {
        q.split('&')
            .find_map(|pair| pair.strip_prefix("token="))
            .map(|t| percent_decode_str(t).decode_utf8_lossy().into_owned())
    });
    let sent = bearer.or(in_query).unwrap_or_default();
    if !bool::from(sent.as_bytes().ct_eq(expected.as_bytes())) {
        return answer(StatusCode::UNAUTHORIZED, "a valid events token is required");
    }
    let bytes =
        match http_body_util::BodyExt::collect(http_body_util::Limited::new(body, EVENTS_BODY_MAX)).await {
            Ok(b) => b.to_bytes(),
            Err(_) => return answer(StatusCode::PAYLOAD_TOO_LARGE, "the notification is larger than 1 MiB"),
        };
    let Ok(doc) = serde_json::from_slice::<serde_json::Value>(&bytes) else {
        return answer(StatusCode::BAD_REQUEST, "the notification is not JSON");
    };
    if doc.get("Type").and_then(|t| t.as_str()) == Some("SubscriptionConfirmation") {
        return confirm_subscription(&up, &doc).await;
    }
    let keys = match keys_of(&doc) {
        Ok(k) if k.len() <= EVENT_KEYS_MAX => k,
        Ok(_) => return answer(StatusCode::BAD_REQUEST, "too many records"),
        Err(why) => return answer(StatusCode::BAD_REQUEST, why),
    };
    let mut targets = BTreeSet::new();
    for (upstream_bucket, key) in keys {
        for local in local_buckets(&up, &upstream_bucket) {
            targets.insert((local, key.clone()));
        }
    }
    let mut applied = 0usize;
    for (bucket, key) in &targets {
        match store.get(schema::bucket(bucket)).await {
            Ok(Some(_)) => {}
            Ok(None) => continue,
            Err(e) => return answer(StatusCode::SERVICE_UNAVAILABLE, &e.message),
        }
        if let Err(e) = super::through::repair_key(store, &up, bucket, key).await {
            tracing::warn!(bucket, key, error = ?e.code, "event not applied; the sender retries");
            return answer(StatusCode::SERVICE_UNAVAILABLE, &e.message);
        }
        applied += 1;
    }
    up.events_applied.fetch_add(applied as u64, std::sync::atomic::Ordering::Relaxed);
    answer(StatusCode::OK, &format!("{{\"applied\":{applied}}}"))
}

/// Confirms an SNS subscription by fetching its SubscribeURL, which must be an HTTPS address
/// of SNS itself (`sns.<region>.amazonaws.com`): anything else would let a caller with the
/// token make the gateway fetch arbitrary addresses.
async fn confirm_subscription(up: &Upstream, doc: &serde_json::Value) -> Response {
    let Some(url) = doc.get("SubscribeURL").and_then(|u| u.as_str()) else {
        return answer(StatusCode::BAD_REQUEST, "a SubscriptionConfirmation without a SubscribeURL");
    };
    let Ok(parsed) = url::Url::parse(url) else {
        return answer(StatusCode::BAD_REQUEST, "a bad SubscribeURL");
    };
    let host_ok = parsed.host_str().is_some_and(|h| h.starts_with("sns.") && h.ends_with(".amazonaws.com"));
    if parsed.scheme() != "https" || !host_ok {
        return answer(StatusCode::BAD_REQUEST, "the SubscribeURL is not an SNS address");
    }
    match up.fetch(url).await {
        Ok(()) => {
            tracing::info!(topic = ?doc.get("TopicArn"), "SNS subscription confirmed");
            answer(StatusCode::OK, "confirmed")
        }
        Err(e) => answer(StatusCode::SERVICE_UNAVAILABLE, &e.message),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_of_minio_ceph_and_sns() {
        let minio = serde_json::json!({
            "EventName": "s3:ObjectCreated:Put",
            "Key": "photos/a b.jpg",
            "Records": [{"eventName": "s3:ObjectCreated:Put",
                         "s3": {"bucket": {"name": "photos"}, "object": {"key": "a+b%2Bc.jpg", "size": 3, "sequencer": "1"}}}]
        });
        assert_eq!(keys_of(&minio).unwrap(), vec![("photos".to_owned(), "a b+c.jpg".to_owned())]);
        let sns = serde_json::json!({"Type": "Notification", "Message": minio["Records"].to_string().replace("[", "{\"Records\":[").replace("}]", "}]}")});
        assert_eq!(keys_of(&sns).unwrap().len(), 1);
        let removed = serde_json::json!({"Records": [{"eventName": "ObjectRemoved:Delete", "s3": {"bucket": {"name": "b"}, "object": {"key": "d%2Fe"}}}]});
        assert_eq!(keys_of(&removed).unwrap(), vec![("b".to_owned(), "d/e".to_owned())]);
        assert!(keys_of(&serde_json::json!({"Event": "s3:TestEvent"})).unwrap().is_empty());
        assert!(keys_of(&serde_json::json!({"Records": [{"s3": {}}]})).is_err());
        assert!(keys_of(&serde_json::json!({"hello": 1})).is_err());
    }
}
