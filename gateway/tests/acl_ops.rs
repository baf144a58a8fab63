//! ACLs: every bucket and object belongs to its bucket's owner (FULL_CONTROL), shown by the ACL
//! calls; what keeps it so is accepted (`private`, `bucket-owner-full-control`, a policy
//! granting only the owner FULL_CONTROL), and so is `public-read` (`anonymous_access.rs`);
//! any other grant is 501 naming the ACL, grant or header, before anything is stored; a value
//! that is no canned ACL is 400.

mod common;

use common::*;
use http::Method;

/// An AccessControlPolicy with the given grants (`(grantee XML, permission)`).
fn policy(grants: &[(&str, &str)]) -> Vec<u8> {
    let mut out = String::from(
        "<AccessControlPolicy xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><Owner><ID>OWNER</ID></Owner>\
         <AccessControlList>",
    );
    for (grantee, permission) in grants {
        out.push_str(&format!(
            "<Grant><Grantee xmlns:xsi=\"http://www.w3.org/2001/XMLSchema-instance\" {grantee}</Grantee>\
             <Permission>{permission}</Permission></Grant>"
        ));
    }
    out.push_str("</AccessControlList></AccessControlPolicy>");
    out.into_bytes()
}

fn owner_grantee() -> String {
    format!("xsi:type=\"CanonicalUser\"><ID>{}</ID>", USER_A.0)
}

#[tokio::test]
async fn the_acl_calls_show_the_owner_with_full_control() {
    let gw = Gw::new();
    gw.create_bucket("bkt").await;
    gw.put("bkt", "k", b"v").await;
    for target in ["/bkt?acl", "/bkt/k?acl"] {
        let r = gw.a(Method::GET, target, b"").await;
        assert_eq!(r.status, 200, "{target}");
        assert_eq!(r.xml_all("ID"), [USER_A.0, USER_A.0], "{target}: owner and grantee");
        assert_eq!(r.xml_all("Permission"), ["FULL_CONTROL"], "{target}");
        assert!(r.text().contains("xsi:type=\"CanonicalUser\""), "{target}");
    }
    gw.a(Method::GET, "/bkt/missing?acl", b"").await.assert_error(404, "NoSuchKey");
    gw.a(Method::GET, "/nobucket?acl", b"").await.assert_error(404, "NoSuchBucket");
    gw.req(USER_B, Method::GET, "/bkt?acl", &[], b"").await.assert_error(403, "AccessDenied");
    gw.req(USER_B, Method::GET, "/bkt/k?acl", &[], b"").await.assert_error(403, "AccessDenied");
}

#[tokio::test]
async fn acls_that_keep_things_private_are_accepted() {
    let gw = Gw::new();
    let r = gw.req(USER_A, Method::PUT, "/bkt", &[("x-amz-acl", "private")], b"").await;
    assert_eq!(r.status, 200);
    for acl in ["private", "bucket-owner-full-control"] {
        let r = gw.req(USER_A, Method::PUT, "/bkt/k", &[("x-amz-acl", acl)], b"v").await;
        assert_eq!(r.status, 200, "{acl}");
        let r = gw.req(USER_A, Method::PUT, "/bkt/k?acl", &[("x-amz-acl", acl)], b"").await;
        assert_eq!(r.status, 200, "{acl}");
        let r = gw.req(USER_A, Method::PUT, "/bkt?acl", &[("x-amz-acl", acl)], b"").await;
        assert_eq!(r.status, 200, "{acl}");
    }
    let headers = [("x-amz-copy-source", "/bkt/k"), ("x-amz-acl", "private")];
    assert_eq!(gw.req(USER_A, Method::PUT, "/bkt/copy", &headers, b"").await.status, 200);
    let r = gw.req(USER_A, Method::POST, "/bkt/up?uploads", &[("x-amz-acl", "private")], b"").await;
    assert_eq!(r.status, 200);
    let owner_only = policy(&[(&owner_grantee(), "FULL_CONTROL")]);
    assert_eq!(gw.a(Method::PUT, "/bkt/k?acl", &owner_only).await.status, 200);
    assert_eq!(gw.a(Method::PUT, "/bkt?acl", &owner_only).await.status, 200);

    // The ACL comes from the header or the document, never both (as S3 answers).
    for target in ["/bkt/k?acl", "/bkt?acl"] {
        gw.req(USER_A, Method::PUT, target, &[("x-amz-acl", "private")], &owner_only)
            .await
            .assert_error(400, "UnexpectedContent");
    }
}

#[tokio::test]
async fn acls_that_would_share_are_refused_and_store_nothing() {
    let gw = Gw::new();
    gw.create_bucket("bkt").await;
    for acl in ["public-read-write", "authenticated-read", "bucket-owner-read"] {
        let r = gw.req(USER_A, Method::PUT, "/bkt/k", &[("x-amz-acl", acl)], b"v").await;
        r.assert_error(501, "NotImplemented");
        assert!(r.text().contains(acl), "the message names {acl}: {}", r.text());
        gw.req(USER_A, Method::PUT, "/bkt?acl", &[("x-amz-acl", acl)], b"")
            .await
            .assert_error(501, "NotImplemented");
        gw.req(USER_A, Method::PUT, "/other", &[("x-amz-acl", acl)], b"")
            .await
            .assert_error(501, "NotImplemented");
    }
    assert_eq!(gw.a(Method::HEAD, "/bkt/k", b"").await.status, 404, "no object stored");
    assert_eq!(gw.a(Method::HEAD, "/other", b"").await.status, 404, "no bucket created");
    let r = gw
        .req(
            USER_A,
            Method::PUT,
            "/bkt/k",
            &[("x-amz-grant-read", "uri=\"http://acs.amazonaws.com/groups/global/AllUsers\"")],
            b"v",
        )
        .await;
    r.assert_error(501, "NotImplemented");
    assert!(r.text().contains("x-amz-grant-read"), "{}", r.text());
    gw.req(USER_A, Method::PUT, "/bkt/k", &[("x-amz-acl", "world-readable")], b"v")
        .await
        .assert_error(400, "InvalidArgument");
    gw.put("bkt", "k", b"v").await;
    let everyone = policy(&[
        (&owner_grantee(), "FULL_CONTROL"),
        ("xsi:type=\"Group\"><URI>http://acs.amazonaws.com/groups/global/AllUsers</URI>", "WRITE"),
    ]);
    let r = gw.a(Method::PUT, "/bkt/k?acl", &everyone).await;
    r.assert_error(501, "NotImplemented");
    assert!(r.text().contains("AllUsers"), "{}", r.text());
    let other_user =
        policy(&[(&format!("xsi:type=\"CanonicalUser\"><ID>{}</ID>", USER_B.0), "FULL_CONTROL")]);
    gw.a(Method::PUT, "/bkt/k?acl", &other_user).await.assert_error(501, "NotImplemented");
    gw.a(Method::PUT, "/bkt/k?acl", b"").await.assert_error(400, "MalformedACLError");
    gw.a(Method::PUT, "/bkt/k?acl", b"<AccessControlPolicy><AccessControlList/></AccessControlPolicy>")
        .await
        .assert_error(400, "MalformedACLError");
    gw.a(Method::PUT, "/bkt/k?acl", b"<nope").await.assert_error(400, "MalformedACLError");
    gw.a(Method::PUT, "/bkt/missing?acl", &policy(&[(&owner_grantee(), "FULL_CONTROL")]))
        .await
        .assert_error(404, "NoSuchKey");
}
