//! The users the gateway knows: access key → secret key.
//!
//! Loaded from a TOML credentials file (`[[users]] access_key = .. secret_key = ..`), from the
//! `HOLT_ACCESS_KEY`/`HOLT_SECRET_KEY` environment variables, or the development user. Secrets
//! are wrapped in [`Secret`], which cannot be printed, so a stray `{:?}` never leaks one.

use std::collections::HashMap;
use std::fmt;
use std::path::Path;
use std::sync::Arc;

use parking_lot::Mutex;

use super::signature::SigningKey;

/// Access key of the development user used when no credentials are configured.
pub const DEV_ACCESS_KEY: &str = "holtadmin";
/// Secret key of the development user used when no credentials are configured.
pub const DEV_SECRET_KEY: &str = "holtadmin-secret-key";

/// Longest access key or secret accepted from configuration; real ones are 20 and 40 bytes.
const KEY_LEN_MAX: usize = 128;

/// A secret access key. Its `Debug` output is redacted and it has no `Display`.
#[derive(Clone)]
pub struct Secret(String);

impl Secret {
    /// Wraps a secret key.
    pub fn new(secret: impl Into<String>) -> Self {
        Secret(secret.into())
    }

    /// The raw secret, for deriving signing keys only.
    pub(crate) fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

/// The configured users.
#[derive(Clone, Debug, Default)]
pub struct Credentials {
    users: HashMap<String, User>,
}

/// One user's secret and the signing key most recently derived from it.
#[derive(Clone, Debug)]
struct User {
    secret: Secret,
    /// Deriving a signing key takes four HMAC-SHA256 computations, and a client signs every
    /// request of a day with the same key: the last one derived is kept per user, keyed by
    /// everything it was derived from (the secret never changes while the gateway runs).
    recent: Arc<Mutex<Option<Derived>>>,
}

#[derive(Debug)]
struct Derived {
    date: String,
    region: String,
    service: String,
    key: SigningKey,
}

impl User {
    fn new(secret: String) -> User {
        User { secret: Secret(secret), recent: Arc::new(Mutex::new(None)) }
    }
}

/// Why a credentials source was rejected.
#[derive(Debug)]
pub enum CredentialsError {
    /// The file could not be read.
    Io(std::io::Error),
    /// The file is not valid TOML of the expected shape.
    Toml(String),
    /// An entry is empty, too long, has characters outside printable ASCII, or repeats a key.
    Invalid(String),
}

impl fmt::Display for CredentialsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CredentialsError::Io(e) => write!(f, "cannot read the credentials file: {e}"),
            CredentialsError::Toml(e) => write!(f, "invalid credentials file: {e}"),
            CredentialsError::Invalid(e) => write!(f, "invalid credentials: {e}"),
        }
    }
}

impl std::error::Error for CredentialsError {}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct CredentialsFile {
    #[serde(default)]
    users: Vec<UserEntry>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct UserEntry {
    access_key: String,
    secret_key: String,
}

impl Credentials {
    /// Builds the user table. Later duplicates of an access key replace earlier ones; use
    /// [`Credentials::try_new`] to reject them instead.
    pub fn new(users: Vec<(String, String)>) -> Self {
        let users = users.into_iter().map(|(access, secret)| (access, User::new(secret))).collect();
        Credentials { users }
    }

    /// Builds the user table, rejecting empty, over-long, non-printable or repeated keys.
    pub fn try_new(users: Vec<(String, String)>) -> Result<Self, CredentialsError> {
        let mut table = HashMap::with_capacity(users.len());
        for (access, secret) in users {
            check_key("access_key", &access)?;
            check_key("secret_key", &secret)?;
            if table.insert(access.clone(), User::new(secret)).is_some() {
                return Err(CredentialsError::Invalid(format!("access key {access} appears twice")));
            }
        }
        Ok(Credentials { users: table })
    }

    /// Parses a TOML credentials document (`[[users]]` tables).
    pub fn from_toml_str(text: &str) -> Result<Self, CredentialsError> {
        let file: CredentialsFile =
            toml::from_str(text).map_err(|e| CredentialsError::Toml(e.to_string()))?;
        Self::try_new(file.users.into_iter().map(|u| (u.access_key, u.secret_key)).collect())
    }

    /// Reads and parses a TOML credentials file.
    pub fn from_file(path: &Path) -> Result<Self, CredentialsError> {
        let text = std::fs::read_to_string(path).map_err(CredentialsError::Io)?;
        Self::from_toml_str(&text)
    }

    /// The single user given by `HOLT_ACCESS_KEY` and `HOLT_SECRET_KEY`, if both are set.
    pub fn from_env() -> Result<Option<Self>, CredentialsError> {
        match (std::env::var("HOLT_ACCESS_KEY"), std::env::var("HOLT_SECRET_KEY")) {
            (Ok(access), Ok(secret)) => Self::try_new(vec![(access, secret)]).map(Some),
            (Err(_), Err(_)) => Ok(None),
            _ => Err(CredentialsError::Invalid(
                "HOLT_ACCESS_KEY and HOLT_SECRET_KEY must be set together".to_owned(),
            )),
        }
    }

    /// The development user (`holtadmin`), for when nothing is configured.
    pub fn development() -> Self {
        Self::new(vec![(DEV_ACCESS_KEY.to_owned(), DEV_SECRET_KEY.to_owned())])
    }

    /// The secret of `access_key`, if that user exists.
    pub fn secret(&self, access_key: &str) -> Option<&Secret> {
        self.users.get(access_key).map(|u| &u.secret)
    }

    /// The signing key of `access_key` for one date, region and service, if that user exists.
    pub(crate) fn signing_key(
        &self,
        access_key: &str,
        date: &str,
        region: &str,
        service: &str,
    ) -> Option<SigningKey> {
        let user = self.users.get(access_key)?;
        if let Some(d) = &*user.recent.lock() {
            if d.date == date && d.region == region && d.service == service {
                return Some(d.key.clone());
            }
        }
        let key = SigningKey::derive(&user.secret, date, region, service);
        *user.recent.lock() = Some(Derived {
            date: date.to_owned(),
            region: region.to_owned(),
            service: service.to_owned(),
            key: key.clone(),
        });
        Some(key)
    }

    /// Number of users.
    pub fn len(&self) -> usize {
        self.users.len()
    }

    /// Whether no user is configured.
    pub fn is_empty(&self) -> bool {
        self.users.is_empty()
    }

    /// The access keys, sorted (for start-up logs; never the secrets).
    pub fn access_keys(&self) -> Vec<&str> {
        let mut keys: Vec<&str> = self.users.keys().map(String::as_str).collect();
        keys.sort_unstable();
        keys
    }
}

fn check_key(what: &str, value: &str) -> Result<(), CredentialsError> {
    if value.is_empty() || value.len() > KEY_LEN_MAX {
        return Err(CredentialsError::Invalid(format!("{what} must be 1..={KEY_LEN_MAX} bytes")));
    }
    // The access key travels inside `Credential=AK/...`: '/', ',', '=' and spaces would make the
    // Authorization header ambiguous, so only printable ASCII without those is allowed.
    let forbidden = |c: char| !c.is_ascii_graphic() || (what == "access_key" && "/,=".contains(c));
    if value.chars().any(forbidden) {
        return Err(CredentialsError::Invalid(format!("{what} has a character that is not allowed")));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The kept key is the one `derive` gives for exactly the same inputs, whatever the order
    /// of requests; a key for another date, region, service or user is never reused.
    #[test]
    fn signing_keys_are_reused_only_for_the_same_scope() {
        let creds =
            Credentials::new(vec![("ak1".into(), "secret1".into()), ("ak2".into(), "secret2".into())]);
        let sig = |k: &SigningKey| k.sign(b"probe").to_hex();
        let expect = |secret: &str, date: &str, region: &str, service: &str| {
            sig(&SigningKey::derive(&Secret::new(secret), date, region, service))
        };
        let scopes = [
            ("ak1", "secret1", "20261123", "us-east-1", "s3"),
            ("ak1", "secret1", "20261123", "us-east-1", "s3"),
            ("ak1", "secret1", "20261124", "us-east-1", "s3"),
            ("ak2", "secret2", "20261123", "us-east-1", "s3"),
            ("ak1", "secret1", "20261124", "eu-west-1", "s3"),
            ("ak1", "secret1", "20261124", "eu-west-1", "sts"),
            ("ak1", "secret1", "20261123", "us-east-1", "s3"),
        ];
        for (ak, secret, date, region, service) in scopes {
            let key = creds.signing_key(ak, date, region, service).expect("known user");
            assert_eq!(sig(&key), expect(secret, date, region, service), "{ak} {date} {region} {service}");
        }
        assert!(creds.signing_key("nobody", "20261123", "us-east-1", "s3").is_none());
    }

    #[test]
    fn toml_file_with_two_users() {
        let creds = Credentials::from_toml_str(
            "[[users]]\naccess_key = \"AKIAEXAMPLE1\"\nsecret_key = \"secret1\"\n\
             [[users]]\naccess_key = \"AKIAEXAMPLE2\"\nsecret_key = \"secret2\"\n",
        )
        .expect("valid file");
        assert_eq!(creds.len(), 2);
        assert_eq!(creds.secret("AKIAEXAMPLE2").map(Secret::expose), Some("secret2"));
        assert!(creds.secret("nobody").is_none());
        assert_eq!(creds.access_keys(), vec!["AKIAEXAMPLE1", "AKIAEXAMPLE2"]);
    }

    #[test]
    fn duplicate_empty_and_unknown_fields_are_rejected() {
        let dup = "[[users]]\naccess_key = \"A\"\nsecret_key = \"s\"\n[[users]]\naccess_key = \"A\"\nsecret_key = \"t\"\n";
        assert!(matches!(Credentials::from_toml_str(dup), Err(CredentialsError::Invalid(_))));
        let empty = "[[users]]\naccess_key = \"\"\nsecret_key = \"s\"\n";
        assert!(matches!(Credentials::from_toml_str(empty), Err(CredentialsError::Invalid(_))));
        let slash = "[[users]]\naccess_key = \"a/b\"\nsecret_key = \"s\"\n";
        assert!(matches!(Credentials::from_toml_str(slash), Err(CredentialsError::Invalid(_))));
        let extra = "[[users]]\naccess_key = \"A\"\nsecret_key = \"s\"\nrole = \"x\"\n";
        assert!(matches!(Credentials::from_toml_str(extra), Err(CredentialsError::Toml(_))));
    }

    #[test]
    fn secrets_never_print() {
        let creds = Credentials::new(vec![("AK".to_owned(), "very-secret-value".to_owned())]);
        let printed = format!("{creds:?}");
        assert!(!printed.contains("very-secret-value"), "{printed}");
        assert!(printed.contains("AK"));
    }
}
