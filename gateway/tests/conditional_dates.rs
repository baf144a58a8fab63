//! Invariant: GetObject and HeadObject evaluate the date preconditions end to end as S3 and
//! RFC 7232 do, at the one-second precision of HTTP dates: If-Modified-Since answers 304
//! unless the object changed after the date, If-Unmodified-Since answers 412
//! PreconditionFailed if it did; If-Match decides over If-Unmodified-Since and If-None-Match
//! over If-Modified-Since; an unparsable date is ignored.

mod common;

use std::time::{Duration, SystemTime};

use common::*;
use http::Method;

const DAY: Duration = Duration::from_secs(86_400);

struct Obj {
    gw: Gw,
    etag: String,
    /// The object's Last-Modified, as sent in its headers.
    modified: SystemTime,
}

async fn object() -> Obj {
    let gw = Gw::new();
    gw.create_bucket("bkt").await;
    gw.put("bkt", "k", b"0123456789").await;
    let head = gw.a(Method::HEAD, "/bkt/k", b"").await;
    let etag = head.header("etag").expect("etag").to_owned();
    let modified = httpdate::parse_http_date(head.header("last-modified").expect("last-modified"))
        .expect("an HTTP date");
    Obj { gw, etag, modified }
}

fn date(t: SystemTime) -> String {
    httpdate::fmt_http_date(t)
}

impl Obj {
    /// Sends GET and HEAD with `conditions` and returns both answers.
    async fn get_and_head(&self, conditions: &[(&str, &str)]) -> [(Method, Resp); 2] {
        let get = self.gw.req(USER_A, Method::GET, "/bkt/k", conditions, b"").await;
        let head = self.gw.req(USER_A, Method::HEAD, "/bkt/k", conditions, b"").await;
        [(Method::GET, get), (Method::HEAD, head)]
    }

    /// Both methods answer 200 with the object.
    #[track_caller]
    fn assert_ok(&self, answers: &[(Method, Resp); 2], what: &str) {
        for (method, r) in answers {
            assert_eq!(r.status, 200, "{method} {what}: {}", r.text());
            assert_eq!(r.header("etag"), Some(self.etag.as_str()), "{method} {what}");
            assert_eq!(r.header("content-length"), Some("10"), "{method} {what}");
            let body: &[u8] = if *method == Method::GET { b"0123456789" } else { b"" };
            assert_eq!(r.body, body, "{method} {what}");
        }
    }

    /// Both methods answer 304 with no body and the validators.
    #[track_caller]
    fn assert_not_modified(&self, answers: &[(Method, Resp); 2], what: &str) {
        for (method, r) in answers {
            assert_eq!(r.status, 304, "{method} {what}: {}", r.text());
            assert!(r.body.is_empty(), "{method} {what}");
            assert_eq!(r.header("etag"), Some(self.etag.as_str()), "{method} {what}");
            assert_eq!(r.header("last-modified"), Some(date(self.modified).as_str()), "{method} {what}");
        }
    }

    /// GET answers 412 PreconditionFailed (its document naming the request id); HEAD the
    /// same status with no body.
    #[track_caller]
    fn assert_precondition_failed(&self, answers: &[(Method, Resp); 2], what: &str) {
        let [(_, get), (_, head)] = answers;
        get.assert_error(412, "PreconditionFailed");
        assert_eq!(head.status, 412, "HEAD {what}");
        assert!(head.body.is_empty(), "HEAD {what}");
        assert!(head.header("x-amz-request-id").is_some(), "HEAD {what}");
    }
}

#[tokio::test]
async fn if_modified_since() {
    let obj = object().await;
    let now = SystemTime::now();
    // Not modified since a date in the future, nor since its own Last-Modified.
    for since in [now + DAY, obj.modified] {
        let answers = obj.get_and_head(&[("if-modified-since", &date(since))]).await;
        obj.assert_not_modified(&answers, &format!("If-Modified-Since {}", date(since)));
    }
    // Modified since a day ago, and since one second before its Last-Modified.
    for since in [obj.modified - DAY, obj.modified - Duration::from_secs(1)] {
        let answers = obj.get_and_head(&[("if-modified-since", &date(since))]).await;
        obj.assert_ok(&answers, &format!("If-Modified-Since {}", date(since)));
    }
}

#[tokio::test]
async fn if_unmodified_since() {
    let obj = object().await;
    // Modified since a day ago, and since one second before its Last-Modified.
    for since in [obj.modified - DAY, obj.modified - Duration::from_secs(1)] {
        let answers = obj.get_and_head(&[("if-unmodified-since", &date(since))]).await;
        obj.assert_precondition_failed(&answers, &format!("If-Unmodified-Since {}", date(since)));
    }
    // Unmodified since its own Last-Modified, and since tomorrow.
    for since in [obj.modified, SystemTime::now() + DAY] {
        let answers = obj.get_and_head(&[("if-unmodified-since", &date(since))]).await;
        obj.assert_ok(&answers, &format!("If-Unmodified-Since {}", date(since)));
    }
}

/// RFC 7232 §6 and the GetObject documentation: If-Match true with If-Unmodified-Since false
/// is 200; If-Match false is 412 whatever If-Unmodified-Since says.
#[tokio::test]
async fn if_match_decides_over_if_unmodified_since() {
    let obj = object().await;
    let past = date(obj.modified - DAY);
    let future = date(SystemTime::now() + DAY);
    let answers = obj.get_and_head(&[("if-match", &obj.etag), ("if-unmodified-since", &past)]).await;
    obj.assert_ok(&answers, "If-Match true, If-Unmodified-Since false");
    let answers = obj.get_and_head(&[("if-match", "\"other\""), ("if-unmodified-since", &future)]).await;
    obj.assert_precondition_failed(&answers, "If-Match false, If-Unmodified-Since true");
}

/// RFC 7232 §6 and the GetObject documentation: If-None-Match false (the ETag matches) with
/// If-Modified-Since true is 304; If-None-Match true is 200 whatever If-Modified-Since says.
#[tokio::test]
async fn if_none_match_decides_over_if_modified_since() {
    let obj = object().await;
    let past = date(obj.modified - DAY);
    let future = date(SystemTime::now() + DAY);
    let answers = obj.get_and_head(&[("if-none-match", &obj.etag), ("if-modified-since", &past)]).await;
    obj.assert_not_modified(&answers, "If-None-Match false, If-Modified-Since true");
    let answers = obj.get_and_head(&[("if-none-match", "\"other\""), ("if-modified-since", &future)]).await;
    obj.assert_ok(&answers, "If-None-Match true, If-Modified-Since false");
}

/// All four at once: If-Match and If-None-Match decide; the dates are not consulted.
#[tokio::test]
async fn etag_conditions_decide_when_all_four_are_present() {
    let obj = object().await;
    let past = date(obj.modified - DAY);
    let future = date(SystemTime::now() + DAY);
    let all = |none_match: &str| {
        [
            ("if-match", obj.etag.clone()),
            ("if-unmodified-since", past.clone()),
            ("if-none-match", none_match.to_owned()),
            ("if-modified-since", future.clone()),
        ]
    };
    let conditions = all("\"other\"");
    let pairs: Vec<(&str, &str)> = conditions.iter().map(|(k, v)| (*k, v.as_str())).collect();
    obj.assert_ok(&obj.get_and_head(&pairs).await, "If-Match and If-None-Match true");
    let conditions = all(&obj.etag);
    let pairs: Vec<(&str, &str)> = conditions.iter().map(|(k, v)| (*k, v.as_str())).collect();
    obj.assert_not_modified(&obj.get_and_head(&pairs).await, "If-Match true, If-None-Match false");
}

/// RFC 7232 §3.3 and §3.4: a value that is not an HTTP date is ignored.
#[tokio::test]
async fn unparsable_dates_are_ignored() {
    let obj = object().await;
    for value in ["yesterday", "", "2024-03-01T12:00:00Z"] {
        for name in ["if-modified-since", "if-unmodified-since"] {
            let answers = obj.get_and_head(&[(name, value)]).await;
            obj.assert_ok(&answers, &format!("{name}: {value:?}"));
        }
    }
}
