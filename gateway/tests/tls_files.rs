//! The certificate and key files of `--listen-tls`: a usable pair loads; a missing, empty,
//! malformed or mismatched file is refused with an error naming the flag, the file and what
//! is wrong; a reload that fails keeps the pair being served.

use std::path::Path;

use gateway::tls::{Certificates, TlsFiles};

fn issue(dir: &Path, name: &str) -> TlsFiles {
    let key = rcgen::KeyPair::generate().expect("key");
    let params = rcgen::CertificateParams::new(vec!["localhost".to_owned()]).expect("parameters");
    let cert = params.self_signed(&key).expect("certificate");
    let files = TlsFiles { cert: dir.join(format!("{name}.crt")), key: dir.join(format!("{name}.key")) };
    std::fs::write(&files.cert, cert.pem()).expect("write cert");
    std::fs::write(&files.key, key.serialize_pem()).expect("write key");
    files
}

fn refused(files: TlsFiles, why: &[&str]) {
    let err = Certificates::load(files).expect_err("a bad pair must be refused");
    for part in why {
        assert!(err.contains(part), "error {err:?} should mention {part:?}");
    }
}

#[test]
fn a_usable_pair_loads_and_bad_files_are_named() {
    let dir = tempfile::tempdir().expect("tempdir");
    let good = issue(dir.path(), "a");
    let certificates = Certificates::load(good.clone()).expect("a usable pair");
    certificates.acceptor().expect("an acceptor");

    let other = issue(dir.path(), "b");
    refused(
        TlsFiles { cert: good.cert.clone(), key: other.key.clone() },
        &["--tls-key", "does not belong", "a.crt"],
    );
    refused(
        TlsFiles { cert: dir.path().join("missing.crt"), key: good.key.clone() },
        &["--tls-cert", "missing.crt"],
    );

    let empty = dir.path().join("empty.crt");
    std::fs::write(&empty, "").expect("write");
    refused(TlsFiles { cert: empty, key: good.key.clone() }, &["--tls-cert", "no CERTIFICATE"]);

    let garbage = dir.path().join("garbage.crt");
    std::fs::write(&garbage, "-----BEGIN CERTIFICATE-----\nnot base64 at all!\n-----END CERTIFICATE-----\n")
        .expect("write");
    refused(TlsFiles { cert: garbage, key: good.key.clone() }, &["--tls-cert", "garbage.crt"]);

    // A certificate given as the key.
    refused(TlsFiles { cert: good.cert.clone(), key: good.cert.clone() }, &["--tls-key", "no private key"]);
}

#[test]
fn a_failed_reload_keeps_the_served_pair() {
    let dir = tempfile::tempdir().expect("tempdir");
    let files = issue(dir.path(), "served");
    let certificates = Certificates::load(files.clone()).expect("a usable pair");
    std::fs::write(&files.key, "not a key").expect("write");
    let err = certificates.reload().expect_err("a broken key must not be served");
    assert!(err.contains("--tls-key"), "{err}");
    // The pair being served is untouched: a new acceptor still builds, and a good pair reloads.
    certificates.acceptor().expect("an acceptor");
    let again = issue(dir.path(), "served");
    assert_eq!(again, files);
    certificates.reload().expect("a usable pair reloads");
}
